-- Schema version 3: one index holds every item a claim may take, in claim order.
--
-- Until version 2 a claim read two indexes: ready items off items_ready, expired
-- leases off items_leases (merged and sorted), and poisoned spent leases in a
-- second UPDATE. PostgreSQL builds and tears down every node of that plan on each
-- execution: with 8 claimers it cost about 15-20 us of server time per claimed and
-- completed item more than a single scan (about 210 us against 188-196 us on the
-- project's machine). Here ready items and held leases share one index, ordered by
-- priority and then by when each is or becomes claimable: its available_at while
-- pending, its lease expiry while claimed. A claim reads the head of it, as a
-- single scan, and takes only due entries (<= now); entries of a higher priority
-- not yet due (delayed items, leases still held) are stepped over inside the index,
-- their rows unread, as delayed items were in items_ready. items_leases stays: the
-- next expiry, heartbeats and reaping read leases off it. The price: a claimed row
-- now enters two indexes instead of one (claim_many(100) measured about 5% slower).
--
-- Building the index locks the items table against writes while it runs (one
-- pass over the pending and claimed rows); migrations run once, under the
-- migration lock.
CREATE INDEX items_claimable ON items (
    pool,
    priority DESC,
    (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END),
    id
) WHERE state IN ('pending', 'claimed');
DROP INDEX items_ready;
