-- Run by the `sqlserver-init` service at every start (each step is skipped when done): the
-- `sales` database with SNAPSHOT isolation allowed, dbo.orders (the simulator's workload table)
-- holding 1,000 orders from before CDC, then CDC on the database and the table. The workload
-- service changes those orders and adds new ones; the source's bootstrap snapshot reads them.
IF DB_ID(N'sales') IS NULL CREATE DATABASE sales;
GO
ALTER DATABASE sales SET ALLOW_SNAPSHOT_ISOLATION ON;
GO
USE sales;
GO
IF OBJECT_ID(N'dbo.orders') IS NULL
BEGIN
    CREATE TABLE dbo.orders (
        order_id bigint NOT NULL PRIMARY KEY,
        customer_id int NOT NULL,
        status varchar(16) NOT NULL,
        amount decimal(18,2) NOT NULL,
        currency char(3) NOT NULL,
        note nvarchar(200) NULL,
        created_at datetime2(3) NOT NULL,
        updated_at datetimeoffset(3) NULL,
        is_priority bit NOT NULL,
        ref uniqueidentifier NULL,
        weight real NULL,
        payload varbinary(64) NULL
    );
    WITH n AS (SELECT TOP (1000) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS i FROM sys.all_objects a CROSS JOIN sys.all_objects b)
    INSERT INTO dbo.orders (order_id, customer_id, status, amount, currency, note, created_at, is_priority, ref, weight)
    SELECT i, 1 + i % 97, 'new', CAST(i % 500 AS decimal(18,2)) + 0.99, CASE i % 3 WHEN 0 THEN 'EUR' WHEN 1 THEN 'USD' ELSE 'GBP' END,
           NULL, SYSDATETIME(), i % 2, NEWID(), CAST(i % 40 AS real)
    FROM n;
END
GO
IF NOT EXISTS (SELECT 1 FROM sys.databases WHERE name = N'sales' AND is_cdc_enabled = 1) EXEC sys.sp_cdc_enable_db;
GO
IF NOT EXISTS (SELECT 1 FROM cdc.change_tables WHERE capture_instance = N'dbo_orders')
    EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'orders', @role_name = NULL, @supports_net_changes = 1;
GO
