//! A TCP proxy a test can cut: it forwards a local port to a server, and on demand refuses
//! connections (every open one cut, every new one closed as soon as it is accepted), as a
//! server that went away would, until it is restored.
//!
//! The listener stays bound while refusing: closing it and binding the port again on restore
//! lost the port, under a full test run, to another process's socket (ports of `127.0.0.1:0`
//! binds and of outgoing connections come from the same ephemeral range), and the proxy then
//! refused for good.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The proxy; stops on drop.
pub struct Proxy {
    /// Where clients connect.
    pub address: SocketAddr,
    refusing: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Forwards a free local port to `target`.
    pub fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let proxy = Self {
            address,
            refusing: Arc::new(AtomicBool::new(false)),
            stopped: Arc::new(AtomicBool::new(false)),
            open: Arc::new(Mutex::new(Vec::new())),
        };
        let (refusing, stopped, open) = (proxy.refusing.clone(), proxy.stopped.clone(), proxy.open.clone());
        std::thread::spawn(move || accept_loop(listener, target, &refusing, &stopped, &open));
        proxy
    }

    /// From now on, connections are refused and open ones are cut.
    pub fn refuse(&self) {
        self.refusing.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Forwards connections again.
    pub fn restore(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stopped.store(true, Ordering::SeqCst);
        self.refuse();
    }
}

/// Forwards each accepted connection while not refusing; while refusing, closes each one at
/// once.
fn accept_loop(listener: TcpListener, target: SocketAddr, refusing: &AtomicBool, stopped: &AtomicBool, open: &Mutex<Vec<TcpStream>>) {
    listener.set_nonblocking(true).unwrap();
    while !stopped.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) if refusing.load(Ordering::SeqCst) => {
                let _ = client.shutdown(Shutdown::Both);
            }
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect(target) else {
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let mut tracked = open.lock().unwrap();
                tracked.retain(|stream| stream.peer_addr().is_ok());
                tracked.push(client.try_clone().unwrap());
                tracked.push(server.try_clone().unwrap());
                drop(tracked);
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
            Err(error) if error.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(5)),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Copies `from` to `to` on a thread until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
