-- Schema version 3: one index holds every item a claim may take, in claim order.
--
-- Until version 2 a claim read two indexes: ready items off items_ready, expired
-- leases off items_leases (merged and sorted), and poisoned spent leases in a
-- second UPDATE. Under concurrency that plan's size cost a fifth of the claim's
-- server time. Here ready items and held leases share one index, ordered by
-- priority and then by when each is or becomes claimable: its available_at while
-- pending, its lease expiry while claimed. A claim reads the head of it, as a
-- single scan, and only its due entries (<= now). items_leases stays: the next
-- expiry, heartbeats and reaping read leases off it.
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
