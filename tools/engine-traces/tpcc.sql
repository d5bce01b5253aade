-- A small TPC-C in SQL for MariaDB/InnoDB (the stand-in for DBT-2 in Möbius §V-B, Fig. 9;
-- docs/engine-traces.md). The nine tables of TPC-C §1.3 with the columns the five transactions
-- touch (and the filler columns that give rows their specified size), one warehouse loaded per
-- TPC-C §4.3.3 (100,000 items, 100,000 stock rows, 10 districts of 3,000 customers, 3,000
-- orders per district of 5-15 lines, the last 900 of each district new), and the five
-- transactions of TPC-C §2.4-2.8 as stored procedures, each one database transaction:
--   new_order (§2.4), payment (§2.5), order_status (§2.6), delivery (§2.7), stock_level (§2.8).
-- tpcc_run(n) runs n transactions in the TPC-C mix (45 % new-order, 43 % payment, 4 % each of
-- the other three; §5.2.3's minimum mix) with no keying or think time.
-- Departures from TPC-C, all to keep it small and free of a client program: inputs are uniform
-- random rather than NURand, customers are always chosen by id (not 60 % by last name), the
-- 1 % of new-orders with an unused item are not rolled back, and delivery runs inline rather
-- than queued. None of them changes which pages a transaction writes in kind.

CREATE TABLE warehouse (w_id INT PRIMARY KEY, w_name VARCHAR(10), w_street_1 VARCHAR(20),
  w_street_2 VARCHAR(20), w_city VARCHAR(20), w_state CHAR(2), w_zip CHAR(9),
  w_tax DECIMAL(4,4), w_ytd DECIMAL(12,2)) ENGINE=InnoDB;
CREATE TABLE district (d_w_id INT, d_id INT, d_name VARCHAR(10), d_street_1 VARCHAR(20),
  d_street_2 VARCHAR(20), d_city VARCHAR(20), d_state CHAR(2), d_zip CHAR(9),
  d_tax DECIMAL(4,4), d_ytd DECIMAL(12,2), d_next_o_id INT,
  PRIMARY KEY (d_w_id, d_id)) ENGINE=InnoDB;
CREATE TABLE customer (c_w_id INT, c_d_id INT, c_id INT, c_first VARCHAR(16), c_middle CHAR(2),
  c_last VARCHAR(16), c_street_1 VARCHAR(20), c_street_2 VARCHAR(20), c_city VARCHAR(20),
  c_state CHAR(2), c_zip CHAR(9), c_phone CHAR(16), c_since DATETIME, c_credit CHAR(2),
  c_credit_lim DECIMAL(12,2), c_discount DECIMAL(4,4), c_balance DECIMAL(12,2),
  c_ytd_payment DECIMAL(12,2), c_payment_cnt INT, c_delivery_cnt INT, c_data VARCHAR(500),
  PRIMARY KEY (c_w_id, c_d_id, c_id)) ENGINE=InnoDB;
CREATE TABLE history (h_id BIGINT AUTO_INCREMENT PRIMARY KEY, h_c_id INT, h_c_d_id INT,
  h_c_w_id INT, h_d_id INT, h_w_id INT, h_date DATETIME, h_amount DECIMAL(6,2),
  h_data VARCHAR(24)) ENGINE=InnoDB;
CREATE TABLE orders (o_w_id INT, o_d_id INT, o_id INT, o_c_id INT, o_entry_d DATETIME,
  o_carrier_id INT, o_ol_cnt INT, o_all_local INT,
  PRIMARY KEY (o_w_id, o_d_id, o_id), KEY (o_w_id, o_d_id, o_c_id, o_id)) ENGINE=InnoDB;
CREATE TABLE new_order (no_w_id INT, no_d_id INT, no_o_id INT,
  PRIMARY KEY (no_w_id, no_d_id, no_o_id)) ENGINE=InnoDB;
CREATE TABLE order_line (ol_w_id INT, ol_d_id INT, ol_o_id INT, ol_number INT, ol_i_id INT,
  ol_supply_w_id INT, ol_delivery_d DATETIME, ol_quantity INT, ol_amount DECIMAL(6,2),
  ol_dist_info CHAR(24), PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number)) ENGINE=InnoDB;
CREATE TABLE item (i_id INT PRIMARY KEY, i_im_id INT, i_name VARCHAR(24), i_price DECIMAL(5,2),
  i_data VARCHAR(50)) ENGINE=InnoDB;
CREATE TABLE stock (s_w_id INT, s_i_id INT, s_quantity INT, s_dist_01 CHAR(24),
  s_dist_02 CHAR(24), s_dist_03 CHAR(24), s_dist_04 CHAR(24), s_dist_05 CHAR(24),
  s_dist_06 CHAR(24), s_dist_07 CHAR(24), s_dist_08 CHAR(24), s_dist_09 CHAR(24),
  s_dist_10 CHAR(24), s_ytd INT, s_order_cnt INT, s_remote_cnt INT, s_data VARCHAR(50),
  PRIMARY KEY (s_w_id, s_i_id)) ENGINE=InnoDB;

-- The load (TPC-C §4.3.3), one warehouse, rows from MariaDB's SEQUENCE engine.
INSERT INTO warehouse VALUES (1, 'W1', 'street one', 'street two', 'city', 'ST', '123451111',
  0.1000, 300000.00);
INSERT INTO item SELECT seq, 1 + seq % 10000, CONCAT('item-', seq), 1 + (seq % 9900) / 100,
  REPEAT('i', 26 + seq % 25) FROM seq_1_to_100000;
INSERT INTO stock SELECT 1, seq, 10 + seq % 91, REPEAT('a', 24), REPEAT('b', 24), REPEAT('c', 24),
  REPEAT('d', 24), REPEAT('e', 24), REPEAT('f', 24), REPEAT('g', 24), REPEAT('h', 24),
  REPEAT('i', 24), REPEAT('j', 24), 0, 0, 0, REPEAT('s', 26 + seq % 25) FROM seq_1_to_100000;
INSERT INTO district SELECT 1, seq, CONCAT('D', seq), 'street one', 'street two', 'city', 'ST',
  '123451111', 0.0500 + seq / 1000, 30000.00, 3001 FROM seq_1_to_10;
INSERT INTO customer SELECT 1, 1 + seq DIV 3000, 1 + seq % 3000, CONCAT('first', seq % 997), 'OE',
  CONCAT('last', seq % 1000), 'street one', 'street two', 'city', 'ST', '123451111',
  '0123456789012345', NOW(), IF(seq % 10 = 0, 'BC', 'GC'), 50000.00, (seq % 5000) / 10000,
  -10.00, 10.00, 1, 0, REPEAT('c', 300 + seq % 200) FROM seq_0_to_29999;
INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data)
  SELECT 1 + seq % 3000, 1 + seq DIV 3000, 1, 1 + seq DIV 3000, 1, NOW(), 10.00,
  REPEAT('h', 12 + seq % 12) FROM seq_0_to_29999;
INSERT INTO orders SELECT 1, 1 + seq DIV 3000, 1 + seq % 3000, 1 + (seq * 7) % 3000, NOW(),
  IF(seq % 3000 < 2100, 1 + seq % 10, NULL), 5 + seq % 11, 1 FROM seq_0_to_29999;
INSERT INTO order_line SELECT o_w_id, o_d_id, o_id, n.seq, 1 + (o_id * 31 + n.seq * 97) % 100000,
  1, IF(o_id <= 2100, o_entry_d, NULL), 5, IF(o_id <= 2100, 0.00, (o_id % 9999) / 100 + 0.01),
  REPEAT('o', 24)
  FROM orders JOIN seq_1_to_15 n ON n.seq <= o_ol_cnt;
INSERT INTO new_order SELECT o_w_id, o_d_id, o_id FROM orders WHERE o_id > 2100;

DELIMITER //

CREATE FUNCTION urand(lo INT, hi INT) RETURNS INT NOT DETERMINISTIC NO SQL
  RETURN lo + FLOOR(RAND() * (hi - lo + 1)) //

-- TPC-C §2.4: a new order of 5-15 lines from the home warehouse.
CREATE PROCEDURE new_order()
BEGIN
  DECLARE d INT DEFAULT urand(1, 10);
  DECLARE c INT DEFAULT urand(1, 3000);
  DECLARE n_lines INT DEFAULT urand(5, 15);
  DECLARE o INT;
  DECLARE n INT DEFAULT 1;
  DECLARE i INT;
  DECLARE q INT;
  DECLARE price DECIMAL(5,2);
  DECLARE tax DECIMAL(4,4);
  DECLARE disc DECIMAL(4,4);
  SELECT w_tax INTO tax FROM warehouse WHERE w_id = 1;
  SELECT d_next_o_id INTO o FROM district WHERE d_w_id = 1 AND d_id = d FOR UPDATE;
  UPDATE district SET d_next_o_id = o + 1 WHERE d_w_id = 1 AND d_id = d;
  SELECT c_discount INTO disc FROM customer WHERE c_w_id = 1 AND c_d_id = d AND c_id = c;
  INSERT INTO orders VALUES (1, d, o, c, NOW(), NULL, n_lines, 1);
  INSERT INTO new_order VALUES (1, d, o);
  WHILE n <= n_lines DO
    SET i = urand(1, 100000);
    SET q = urand(1, 10);
    SELECT i_price INTO price FROM item WHERE i_id = i;
    UPDATE stock SET s_quantity = IF(s_quantity >= q + 10, s_quantity - q, s_quantity - q + 91),
      s_ytd = s_ytd + q, s_order_cnt = s_order_cnt + 1 WHERE s_w_id = 1 AND s_i_id = i;
    INSERT INTO order_line VALUES (1, d, o, n, i, 1, NULL, q, q * price, REPEAT('o', 24));
    SET n = n + 1;
  END WHILE;
END //

-- TPC-C §2.5: a payment by a customer of the home warehouse.
CREATE PROCEDURE payment()
BEGIN
  DECLARE d INT DEFAULT urand(1, 10);
  DECLARE c INT DEFAULT urand(1, 3000);
  DECLARE amount DECIMAL(6,2) DEFAULT urand(100, 500000) / 100;
  UPDATE warehouse SET w_ytd = w_ytd + amount WHERE w_id = 1;
  UPDATE district SET d_ytd = d_ytd + amount WHERE d_w_id = 1 AND d_id = d;
  UPDATE customer SET c_balance = c_balance - amount, c_ytd_payment = c_ytd_payment + amount,
    c_payment_cnt = c_payment_cnt + 1,
    c_data = IF(c_credit = 'BC', LEFT(CONCAT(c, ' ', d, ' ', amount, ' ', c_data), 500), c_data)
    WHERE c_w_id = 1 AND c_d_id = d AND c_id = c;
  INSERT INTO history (h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data)
    VALUES (c, d, 1, d, 1, NOW(), amount, 'W1    D');
END //

-- TPC-C §2.6: a customer's balance, last order and its lines (read-only).
CREATE PROCEDURE order_status()
BEGIN
  DECLARE d INT DEFAULT urand(1, 10);
  DECLARE c INT DEFAULT urand(1, 3000);
  DECLARE o INT;
  DECLARE bal DECIMAL(12,2);
  DECLARE n_lines INT;
  SELECT c_balance INTO bal FROM customer WHERE c_w_id = 1 AND c_d_id = d AND c_id = c;
  SELECT MAX(o_id) INTO o FROM orders WHERE o_w_id = 1 AND o_d_id = d AND o_c_id = c;
  SELECT COUNT(*) INTO n_lines FROM order_line WHERE ol_w_id = 1 AND ol_d_id = d AND ol_o_id = o;
END //

-- TPC-C §2.7: deliver the oldest new order of each of the 10 districts.
CREATE PROCEDURE delivery()
BEGIN
  DECLARE d INT DEFAULT 1;
  DECLARE o INT;
  DECLARE c INT;
  DECLARE total DECIMAL(12,2);
  DECLARE carrier INT DEFAULT urand(1, 10);
  WHILE d <= 10 DO
    SET o = NULL;
    SELECT MIN(no_o_id) INTO o FROM new_order WHERE no_w_id = 1 AND no_d_id = d;
    IF o IS NOT NULL THEN
      DELETE FROM new_order WHERE no_w_id = 1 AND no_d_id = d AND no_o_id = o;
      SELECT o_c_id INTO c FROM orders WHERE o_w_id = 1 AND o_d_id = d AND o_id = o;
      UPDATE orders SET o_carrier_id = carrier WHERE o_w_id = 1 AND o_d_id = d AND o_id = o;
      UPDATE order_line SET ol_delivery_d = NOW()
        WHERE ol_w_id = 1 AND ol_d_id = d AND ol_o_id = o;
      SELECT SUM(ol_amount) INTO total FROM order_line
        WHERE ol_w_id = 1 AND ol_d_id = d AND ol_o_id = o;
      UPDATE customer SET c_balance = c_balance + total, c_delivery_cnt = c_delivery_cnt + 1
        WHERE c_w_id = 1 AND c_d_id = d AND c_id = c;
    END IF;
    SET d = d + 1;
  END WHILE;
END //

-- TPC-C §2.8: items of the district's last 20 orders whose stock is below a threshold
-- (read-only).
CREATE PROCEDURE stock_level()
BEGIN
  DECLARE d INT DEFAULT urand(1, 10);
  DECLARE threshold INT DEFAULT urand(10, 20);
  DECLARE o INT;
  DECLARE low INT;
  SELECT d_next_o_id INTO o FROM district WHERE d_w_id = 1 AND d_id = d;
  SELECT COUNT(DISTINCT s_i_id) INTO low FROM order_line JOIN stock
    ON s_w_id = 1 AND s_i_id = ol_i_id
    WHERE ol_w_id = 1 AND ol_d_id = d AND ol_o_id >= o - 20 AND ol_o_id < o
      AND s_quantity < threshold;
END //

-- One transaction of type r (1-100 in the mix), committed; rolled back on a deadlock or a lock
-- wait timeout (counted in @aborted, committed ones in @committed).
CREATE PROCEDURE tpcc_one(r INT)
BEGIN
  DECLARE EXIT HANDLER FOR SQLEXCEPTION
  BEGIN
    ROLLBACK;
    SET @aborted = @aborted + 1;
  END;
  START TRANSACTION;
  IF r <= 45 THEN CALL new_order();
  ELSEIF r <= 88 THEN CALL payment();
  ELSEIF r <= 92 THEN CALL order_status();
  ELSEIF r <= 96 THEN CALL delivery();
  ELSE CALL stock_level();
  END IF;
  COMMIT;
  SET @committed = @committed + 1;
END //

-- n transactions in the TPC-C mix, each committed on its own; then the session's counts.
CREATE PROCEDURE tpcc_run(n INT)
BEGIN
  DECLARE k INT DEFAULT 0;
  SET @committed = 0, @aborted = 0;
  WHILE k < n DO
    CALL tpcc_one(urand(1, 100));
    SET k = k + 1;
  END WHILE;
  SELECT @committed, @aborted;
END //

DELIMITER ;
