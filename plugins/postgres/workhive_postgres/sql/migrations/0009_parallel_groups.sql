-- Schema version 9: grouped claims run in parallel (issue 28).
--
-- In version 8 every grouped claim locked its pool's group_pools row FOR UPDATE and held
-- it through its commit, so the grouped claims of a pool ran one at a time, each waiting
-- for the previous one's WAL flush: 0.15-0.38x the throughput of the same items
-- ungrouped (bench/fairness.py), where claims only lock item rows (SKIP LOCKED). Most of
-- that time only one group is backlogged, and every claim wanted the same lock.
--
-- Now a claim locks only what a rule needs:
-- - the pool's row, FOR UPDATE, only when the pool has a pool_limit (GR7 counts the
--   pool's claims: every claim of such a pool runs one at a time, as before);
-- - a group's row, taken with SKIP LOCKED when the claim visits the group: the claim
--   that holds it ("owns" the group until it commits) counts its claims in flight
--   against its limit after taking it (GR6 exact: a group with a limit is claimed from
--   only by its owner), advances its vt, and may clear it;
-- - a group whose row another claim holds is "busy": without a limit its items are
--   still claimed (SKIP LOCKED on the items), the turn written down as a debt
--   (group_debts, insert-only: no row anybody waits on) that the group's next owner adds
--   to its vt. Within one call the claim counts its own borrowed turns, so a busy group
--   takes turns with the rest as if its vt were written. A busy group with a limit is
--   skipped.
-- Sequential claims never find a group busy (a push or a setting holds a group's row
-- only until it commits): for them turns are exactly those of version 8 (GR2-GR4).
-- Under concurrency a turn is decided on committed vts plus this call's own turns, so
-- claims running at once may take the same turn: approximate, corrected as debts and
-- vts commit, never a wait.
--
-- The pool's vt (the turn the last served group had: where a group that becomes ready
-- starts, GR4) is raised in the claim's last statement, and only if no other claim holds
-- the row then (SKIP LOCKED: a claim never waits for it; the other raises it too, vt
-- only grows). It lags by the claims in flight, never more.
--
-- Limits without a pool lock: a claim reads the limits, then claims by them. A setting
-- committed in between must not let a later claim, counting committed claims only,
-- miss this one's. So every grouped claim holds a shared transaction-level advisory
-- lock on the pool's key (group_settings_key), and the statements that change a limit
-- (pool, default or group) take it exclusive first: a limit changes between claims of
-- the pool, never during one. Weights and pauses keep no count: they take no lock.

-- Turns taken from groups whose row another claim held: (pool, grp) is owed `turns`
-- (sum of 1/weight per item) of virtual time. Written by the borrowing claim, deleted
-- and added to groups.vt by the group's next owner. Never updated in place.
CREATE TABLE group_debts (
    pool text NOT NULL,
    grp text NOT NULL,
    turns float8 NOT NULL
);
CREATE INDEX group_debts_owed ON group_debts (pool, grp);

-- The advisory lock key of pool p_pool's limits in this hive (schema).
CREATE FUNCTION group_settings_key(p_pool text) RETURNS bigint
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT hashtextextended('workhive-groups:' || current_schema() || ':' || p_pool, 0) $$;

-- See the head of this file; rules GR1-GR9 in workhive.storage. Rows as in version 8.
-- For each item (GR2: a batch is n successive claims): the pool limit if any (counted
-- under the pool's lock), then, band by band from the highest (GR5), the live groups in
-- (vt, grp) order: each not paused (GR8) is taken (owned: its debts folded into its vt,
-- its limit counted) or found busy (skipped if it has a limit); its effective vt is its
-- vt plus what this call borrowed from it. The group with the lowest effective vt that
-- has a due item (oldest in C1 order, FOR UPDATE SKIP LOCKED) takes the turn; the scan
-- stops at the first group whose vt is no lower than the best found. The item is claimed
-- (or poisoned, as claim_items does: then the turn is taken again); an owned group's vt
-- becomes max(vt, pool vt) + 1/weight, a busy group's debt grows by 1/weight.
CREATE OR REPLACE FUNCTION claim_grouped(clock_offset float8, p_pool text, p_worker text, p_lease float8, p_limit integer)
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
    pool_vt float8;
    band integer;
    g record;
    is_mine boolean;
    m_vt float8;
    m_weight float8;
    m_lim integer;
    m_paused float8;
    cap integer;
    owned text[] := '{}';         -- groups whose row this call holds
    borrowed text[] := '{}';      -- busy groups this call took turns from ...
    owed float8[] := '{}';        -- ... and the turns it took (sum of 1/weight), in step
    k integer;
    debt float8;
    eff float8;
    vt_now float8;
    weight_now float8;
    best_grp text;
    best_eff float8;
    best_vt float8;
    best_weight float8;
    best_owned boolean;
    best_id bigint;
    found_id bigint;
    served integer := 0;
    got record;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(group_settings_key(p_pool));
    SELECT * INTO settings FROM group_pools AS gp WHERE gp.pool = p_pool;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF settings.pool_limit IS NOT NULL THEN
        -- GR7: counts of the pool's claims are exact only one claim at a time.
        SELECT * INTO settings FROM group_pools AS gp WHERE gp.pool = p_pool FOR UPDATE;
    END IF;
    pool_vt := settings.vt;
    INSERT INTO groups AS gr (pool, grp, live) VALUES (p_pool, '', true) ON CONFLICT DO NOTHING;
    <<items>>
    WHILE served < p_limit LOOP
        IF settings.pool_limit IS NOT NULL AND (
            SELECT count(*) FROM items AS i
            WHERE i.pool = p_pool AND i.state = 'claimed' AND i.lease_expires_at > at
        ) >= settings.pool_limit THEN
            EXIT items;
        END IF;
        best_id := NULL;
        <<bands>>
        FOR band IN SELECT b.priority FROM claim_bands AS b WHERE b.pool = p_pool ORDER BY b.priority DESC LOOP
            best_grp := NULL;
            <<groups>>
            FOR g IN
                SELECT gr.grp, gr.weight, gr.lim, gr.paused_until, gr.vt FROM groups AS gr
                WHERE gr.pool = p_pool AND gr.live ORDER BY gr.vt, gr.grp
            LOOP
                -- Every later group has a vt at least this one's: none can beat the best.
                EXIT groups WHEN best_grp IS NOT NULL AND g.vt >= best_eff;
                CONTINUE WHEN g.paused_until > at;
                IF g.grp = ANY (owned) THEN
                    is_mine := true;
                    m_vt := g.vt; m_weight := g.weight; m_lim := g.lim;
                ELSE
                    SELECT gr.weight, gr.lim, gr.paused_until, gr.vt INTO m_weight, m_lim, m_paused, m_vt
                    FROM groups AS gr WHERE gr.pool = p_pool AND gr.grp = g.grp FOR UPDATE SKIP LOCKED;
                    is_mine := FOUND;
                    IF is_mine THEN
                        owned := owned || g.grp;
                        -- Debts committed by claims that borrowed turns from it: now its vt.
                        WITH paid AS (
                            DELETE FROM group_debts AS d WHERE d.pool = p_pool AND d.grp = g.grp RETURNING d.turns
                        ) SELECT sum(paid.turns) INTO debt FROM paid;
                        IF debt IS NOT NULL THEN
                            UPDATE groups AS gr SET vt = gr.vt + debt WHERE gr.pool = p_pool AND gr.grp = g.grp;
                            m_vt := m_vt + debt;
                        END IF;
                        CONTINUE WHEN m_paused > at;
                    END IF;
                END IF;
                cap := CASE WHEN g.grp = '' THEN NULL
                    WHEN is_mine THEN coalesce(m_lim, settings.default_limit)
                    ELSE coalesce(g.lim, settings.default_limit) END;
                IF cap IS NOT NULL THEN
                    -- GR6: only the owner counts, after taking the row (this statement's snapshot
                    -- sees every claim of the group committed before, and this call's own).
                    CONTINUE WHEN NOT is_mine;
                    CONTINUE WHEN (
                        SELECT count(*) FROM items AS i
                        WHERE i.pool = p_pool AND i.grp = g.grp AND i.state = 'claimed' AND i.lease_expires_at > at
                    ) >= cap;
                END IF;
                IF is_mine THEN
                    vt_now := m_vt;
                    weight_now := m_weight;
                    eff := vt_now;
                ELSE
                    vt_now := g.vt;
                    weight_now := g.weight;
                    k := array_position(borrowed, g.grp);
                    eff := g.vt + CASE WHEN k IS NULL THEN 0 ELSE owed[k] END;
                END IF;
                CONTINUE WHEN best_grp IS NOT NULL AND eff >= best_eff;
                -- May leave an earlier candidate's item locked, unclaimed, until this commits (only
                -- when a busy group's borrowed turns put it behind a later one).
                SELECT i.id INTO found_id FROM items AS i
                WHERE i.pool = p_pool AND i.grp = g.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
                LIMIT 1 FOR UPDATE SKIP LOCKED;
                IF found_id IS NOT NULL THEN
                    best_grp := g.grp; best_eff := eff; best_vt := vt_now; best_weight := weight_now;
                    best_owned := is_mine; best_id := found_id;
                    CONTINUE;
                END IF;
                IF is_mine AND g.grp <> '' AND NOT EXISTS (
                    SELECT FROM items AS i WHERE i.pool = p_pool AND i.grp = g.grp AND i.state IN ('pending', 'claimed')
                ) THEN
                    -- This call holds the row, taken before this look (a new snapshot): a push or
                    -- requeue that held it first has committed its items, one that comes later
                    -- waits for this commit and sets live again.
                    UPDATE groups AS gr SET live = false WHERE gr.pool = p_pool AND gr.grp = g.grp;
                END IF;
            END LOOP;
            EXIT bands WHEN best_grp IS NOT NULL;
        END LOOP;
        EXIT items WHEN best_id IS NULL;
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
        WHERE i.id = best_id
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
            IF best_owned THEN
                UPDATE groups AS gr SET vt = greatest(best_vt, pool_vt) + 1.0 / best_weight
                WHERE gr.pool = p_pool AND gr.grp = best_grp;
                pool_vt := greatest(pool_vt, best_vt);
            ELSE
                k := array_position(borrowed, best_grp);
                IF k IS NULL THEN
                    borrowed := borrowed || best_grp;
                    owed := owed || (1.0 / best_weight);
                ELSE
                    owed[k] := owed[k] + 1.0 / best_weight;
                END IF;
                pool_vt := greatest(pool_vt, best_eff);
            END IF;
        END IF;
    END LOOP;
    IF cardinality(borrowed) > 0 THEN
        INSERT INTO group_debts (pool, grp, turns) SELECT p_pool, b.grp, b.turns FROM unnest(borrowed, owed) AS b (grp, turns);
    END IF;
    IF pool_vt > settings.vt THEN
        -- Last, and never waited for: the row is held from here to the commit only.
        UPDATE group_pools AS gp SET vt = greatest(gp.vt, pool_vt)
        WHERE gp.pool = p_pool AND gp.pool IN (
            SELECT locked.pool FROM group_pools AS locked WHERE locked.pool = p_pool FOR UPDATE SKIP LOCKED);
    END IF;
END
$$;
