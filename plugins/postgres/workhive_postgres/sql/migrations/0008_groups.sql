-- Schema version 8: groups (issue 28; rules GR1-GR9 in workhive.storage). An item may
-- carry a group (a tenant): claims serve the groups that have claimable items in turn
-- (weighted fair queueing on a virtual time per group), inside priority, with limits on
-- the items in flight per group and per pool, and pauses.
--
-- items.grp: the item's group; '' = ungrouped (every item stored before version 8; a
-- constant default, so adding the column rewrites nothing). items_claimable now leads
-- with (pool, grp): a claim of a pool without groups asks for `grp = ''` and reads the
-- head of the same range it read before; a grouped claim asks for one group's head. The
-- index was rebuilt rather than a second one added, so a pool without groups writes no
-- more index entries per item than in version 7. '' rather than NULL: `grp IS NULL` is no
-- equality to the planner, which then sorted the whole range instead of reading it in
-- index order (17 ms against 0.26 ms for one claim from a 2,500-item backlog); and an
-- index entry holding a NULL carries a null bitmap (48 bytes an entry instead of 40).
ALTER TABLE items ADD COLUMN grp text NOT NULL DEFAULT '';

DROP INDEX items_claimable;
CREATE INDEX items_claimable ON items (
    pool,
    grp,
    priority DESC,
    (CASE WHEN state = 'pending' THEN available_at ELSE lease_expires_at END),
    id
) WHERE state IN ('pending', 'claimed');

-- In-flight claims of named groups, to count them against a group's limit (O(limit)).
-- Partial on grp: ungrouped items never enter it.
CREATE INDEX items_group_leases ON items (pool, grp, lease_expires_at) WHERE state = 'claimed' AND grp <> '';

-- A pool with groups: a row here (written by the first grouped push or the first group
-- setting, never deleted) switches its claims to claim_grouped. pool_limit caps the
-- unexpired claims of the pool, default_limit those of each named group without a
-- limit of its own; vt is the pool's virtual time (the turn the last served group had).
-- Grouped claims of a pool lock this row: they run one at a time, which is what makes
-- every limit exact across processes (see claim_grouped).
CREATE TABLE group_pools (
    pool text PRIMARY KEY,
    pool_limit integer,
    default_limit integer,
    vt float8 NOT NULL DEFAULT 0
);

-- One row per group of a pool that was pushed to or given a setting; grp '' is the
-- ungrouped items (one group for turns, weight 1, bound only by the pool limit).
-- weight_set: the weight was given (group_report lists the group then, even at weight 1).
-- live: the group may hold pending or claimed items. Pushes and requeues set it (their
-- upsert locks the row until they commit); a claim clears it, under the row lock and in a
-- statement after taking it, when the group has no live item left. Claims visit only
-- live groups, in turn order (groups_turns), so groups that are done cost nothing.
CREATE TABLE groups (
    pool text NOT NULL,
    grp text NOT NULL,
    weight float8 NOT NULL DEFAULT 1,
    weight_set boolean NOT NULL DEFAULT false,
    lim integer,
    paused_until float8,
    vt float8 NOT NULL DEFAULT 0,
    live boolean NOT NULL DEFAULT false,
    PRIMARY KEY (pool, grp)
);
CREATE INDEX groups_turns ON groups (pool, vt, grp) WHERE live;

-- The claim of a pool with groups: up to p_limit items, each as one claim of its own
-- (GR2: a batch is n successive claims). For each: the highest priority band that any
-- admissible group has a claimable item in (GR5); in that band, the live group with the
-- smallest vt (ties: name; '' first) that is not paused (GR8), is under its limit (GR6)
-- and has a due item takes its turn: its oldest item in claim order (C1), locked FOR
-- UPDATE SKIP LOCKED, is claimed as claim_items claims (or poisoned, if it is an expired
-- lease with no attempts left: then it does not count and the turn is taken again), and
-- its vt becomes max(vt, pool vt) + 1/weight, the pool's vt max(pool vt, its old vt)
-- (GR3, GR4: an idle group starts at the pool's turn and banks no credit).
--
-- Concurrency: the pool's group_pools row is locked FOR UPDATE first, so the grouped
-- claims of one pool run one at a time. PL/pgSQL takes a fresh snapshot for every
-- statement under READ COMMITTED, so each count of claims in flight that follows the lock
-- sees every claim committed before it, and sees this call's own: no limit is exceeded
-- across processes (GR6, GR7). Completions, failures and pushes do not take the lock.
-- Cost per item: one probe of a group's head per group visited. Groups visited and
-- passed over are those live ones ahead in turn order that are paused, at their limit,
-- or have nothing due in the band; a group found without any live item is cleared.
--
-- Written with search_path fixed at creation (the hive's schema, set by the migration
-- runner), so it reads the hive's tables whatever the caller's search_path.
CREATE FUNCTION claim_grouped(clock_offset float8, p_pool text, p_worker text, p_lease float8, p_limit integer)
RETURNS TABLE (
    id bigint, payload text, priority integer, attempts integer, max_attempts integer, token bigint,
    created_at float8, available_at float8, lease_expires_at float8, dedup_key text, error text,
    releases integer, taken boolean, grp text
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    at float8 := now_s(clock_offset);
    settings group_pools%ROWTYPE;
    band integer;
    g record;
    cap integer;
    found_id bigint;
    served integer := 0;
    got record;
BEGIN
    SELECT * INTO settings FROM group_pools AS gp WHERE gp.pool = p_pool FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO groups AS gr (pool, grp, live) VALUES (p_pool, '', true) ON CONFLICT DO NOTHING;
    <<items>>
    WHILE served < p_limit LOOP
        IF settings.pool_limit IS NOT NULL AND (
            SELECT count(*) FROM items AS i
            WHERE i.pool = p_pool AND i.state = 'claimed' AND i.lease_expires_at > at
        ) >= settings.pool_limit THEN
            EXIT items;
        END IF;
        found_id := NULL;
        <<bands>>
        FOR band IN SELECT b.priority FROM claim_bands AS b WHERE b.pool = p_pool ORDER BY b.priority DESC LOOP
            FOR g IN
                SELECT gr.grp, gr.weight, gr.lim, gr.paused_until, gr.vt FROM groups AS gr
                WHERE gr.pool = p_pool AND gr.live ORDER BY gr.vt, gr.grp
            LOOP
                CONTINUE WHEN g.paused_until > at;
                cap := CASE WHEN g.grp = '' THEN NULL ELSE coalesce(g.lim, settings.default_limit) END;
                IF cap IS NOT NULL AND (
                    SELECT count(*) FROM items AS i
                    WHERE i.pool = p_pool AND i.grp = g.grp AND i.state = 'claimed' AND i.lease_expires_at > at
                ) >= cap THEN
                    CONTINUE;
                END IF;
                SELECT i.id INTO found_id FROM items AS i
                WHERE i.pool = p_pool AND i.grp = g.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
                LIMIT 1 FOR UPDATE SKIP LOCKED;
                EXIT bands WHEN found_id IS NOT NULL;
                IF g.grp <> '' AND NOT EXISTS (
                    SELECT FROM items AS i WHERE i.pool = p_pool AND i.grp = g.grp AND i.state IN ('pending', 'claimed')
                ) THEN
                    -- Locked first, looked at again after: a push or requeue that holds the row has
                    -- committed its items by the time the second look (a new snapshot) runs.
                    PERFORM FROM groups AS gr WHERE gr.pool = p_pool AND gr.grp = g.grp FOR UPDATE;
                    UPDATE groups AS gr SET live = false
                    WHERE gr.pool = p_pool AND gr.grp = g.grp AND NOT EXISTS (
                        SELECT FROM items AS i WHERE i.pool = p_pool AND i.grp = g.grp AND i.state IN ('pending', 'claimed'));
                END IF;
            END LOOP;
        END LOOP;
        EXIT items WHEN found_id IS NULL;
        UPDATE items AS i SET
            state = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN 'claimed' ELSE 'poisoned' END,
            available_at = CASE WHEN i.state = 'claimed' AND i.attempts < i.max_attempts THEN i.lease_expires_at ELSE i.available_at END,
            claimed_by = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN p_worker ELSE i.claimed_by END,
            attempts = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN i.attempts + 1 ELSE i.attempts END,
            token = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN i.token + 1 ELSE i.token END,
            lease_seconds = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN p_lease END,
            lease_expires_at = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN at + p_lease END,
            error = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN i.error
                ELSE 'lease expired after attempt ' || i.attempts || ' of ' || i.max_attempts
                    || ' (worker ' || coalesce(i.claimed_by, '?') || ' stopped heartbeating or crashed)' END,
            finished_at = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN i.finished_at ELSE at END
        WHERE i.id = found_id
        RETURNING i.id, i.payload, i.priority, i.attempts, i.max_attempts, i.token, i.created_at, i.available_at,
            i.lease_expires_at, i.dedup_key, i.error, i.releases, i.state = 'claimed' AS is_taken, i.grp
        INTO got;
        id := got.id; payload := got.payload; priority := got.priority; attempts := got.attempts;
        max_attempts := got.max_attempts; token := got.token; created_at := got.created_at;
        available_at := got.available_at; lease_expires_at := got.lease_expires_at; dedup_key := got.dedup_key;
        error := got.error; releases := got.releases; taken := got.is_taken; grp := got.grp;
        RETURN NEXT;
        IF taken THEN
            served := served + 1;
            UPDATE groups AS gr SET vt = greatest(g.vt, settings.vt) + 1.0 / g.weight
            WHERE gr.pool = p_pool AND gr.grp = g.grp;
            settings.vt := greatest(settings.vt, g.vt);
        END IF;
    END LOOP;
    UPDATE group_pools AS gp SET vt = settings.vt WHERE gp.pool = p_pool AND gp.vt <> settings.vt;
END
$$;

-- When the next item of a pool with groups may be claimed, in seconds from now (<= 0: now;
-- NULL: nothing is coming), for an idle worker's wait: per live group, the first entry of
-- each band (a pending item's available_at, a held lease's expiry), no sooner than its
-- pause ends, nor, while the group (or the pool) is at its limit, than its first claim
-- in flight expires (a completion frees a slot sooner; waiters poll for that). Visits
-- every live group: it runs when a worker has nothing to do, never in a claim.
CREATE FUNCTION next_due_grouped(clock_offset float8, p_pool text) RETURNS float8
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    at float8 := now_s(clock_offset);
    settings group_pools%ROWTYPE;
    g record;
    cap integer;
    head float8;
    held bigint;
    freed float8;
    soonest float8;
BEGIN
    SELECT * INTO settings FROM group_pools AS gp WHERE gp.pool = p_pool;
    FOR g IN SELECT gr.grp, gr.lim, gr.paused_until FROM groups AS gr WHERE gr.pool = p_pool AND gr.live LOOP
        SELECT min(h.due) INTO head FROM claim_bands AS b CROSS JOIN LATERAL (
            SELECT (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) AS due
            FROM items AS i
            WHERE i.pool = p_pool AND i.grp = g.grp AND i.priority = b.priority AND i.state IN ('pending', 'claimed')
            ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
            LIMIT 1
        ) AS h WHERE b.pool = p_pool;
        CONTINUE WHEN head IS NULL;
        IF g.paused_until > head THEN
            head := g.paused_until;
        END IF;
        cap := CASE WHEN g.grp = '' THEN NULL ELSE coalesce(g.lim, settings.default_limit) END;
        IF cap IS NOT NULL THEN
            SELECT count(*), min(i.lease_expires_at) INTO held, freed FROM items AS i
            WHERE i.pool = p_pool AND i.grp = g.grp AND i.state = 'claimed' AND i.lease_expires_at > at;
            IF held >= cap THEN
                head := greatest(head, freed);
            END IF;
        END IF;
        soonest := least(soonest, head);
    END LOOP;
    IF soonest IS NOT NULL AND settings.pool_limit IS NOT NULL THEN
        SELECT count(*), min(i.lease_expires_at) INTO held, freed FROM items AS i
        WHERE i.pool = p_pool AND i.state = 'claimed' AND i.lease_expires_at > at;
        IF held >= settings.pool_limit THEN
            soonest := greatest(soonest, freed);
        END IF;
    END IF;
    RETURN soonest - at;
END
$$;

-- complete_and_claim for a pool with groups: complete item p_id under token p_token with
-- p_result if its claim is current and unexpired; only then claim as claim_grouped does.
-- One call, so the pool's lock is held for the server's work only, never across a round
-- trip (as a client-side transaction it was held until the COMMIT arrived). Rows as
-- claim_grouped's, each with accepted first; one row of NULLs but accepted when the
-- completion was accepted and nothing was claimed; no row when it was refused.
CREATE FUNCTION complete_and_claim_grouped(
    clock_offset float8, p_pool text, p_id bigint, p_token bigint, p_result text,
    p_worker text, p_lease float8, p_limit integer
)
RETURNS TABLE (
    accepted boolean, id bigint, payload text, priority integer, attempts integer, max_attempts integer,
    token bigint, created_at float8, available_at float8, lease_expires_at float8, dedup_key text, error text,
    releases integer, taken boolean, grp text
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
AS $$
DECLARE
    at float8 := now_s(clock_offset);
    claimed integer := 0;
BEGIN
    UPDATE items AS i SET state = 'done', result = p_result, finished_at = at, lease_expires_at = NULL, lease_seconds = NULL
    WHERE i.id = p_id AND (i.pool = p_pool AND i.state = 'claimed' AND i.token = p_token AND i.lease_expires_at > at) IS TRUE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT true, c.* FROM claim_grouped(clock_offset, p_pool, p_worker, p_lease, p_limit) AS c;
    GET DIAGNOSTICS claimed = ROW_COUNT;
    IF claimed = 0 THEN
        accepted := true;
        RETURN NEXT;
    END IF;
END
$$;
