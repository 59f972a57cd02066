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
--   to its vt. A busy group takes turns with the rest at its committed vt plus the debts
--   committed since plus the turns this call took from it. A busy group with a limit is
--   skipped.
-- Sequential claims never find a group busy (a push or a setting holds a group's row
-- only until it commits): for them turns are exactly those of version 8 (GR2-GR4).
-- Under concurrency a turn is decided on what has committed plus this call's own turns,
-- so claims running at once may deal the same turns: approximate, corrected as debts and
-- vts commit, never a wait. Waits left: for the first claims of a pool (adding its
-- ungrouped turns row) and, in a pool with a pool limit, for the pool's row.
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
--
-- A batch is planned, then claimed with two statements, instead of one item at a time (at
-- ~10 statements an item, version 8 spent 0.5-0.6 ms of server CPU per item against
-- 0.02-0.03 ms for an ungrouped claim). A round: the pool limit, if any, caps what is
-- wanted (counted under the pool's lock); in the highest band (GR5) where an admissible
-- group has due items, the turns are dealt as successive one-item claims would deal
-- them (GR2-GR4): the live groups are read in (vt, grp) order only as far as the turns
-- reach (a group is admitted when its vt comes before the best of those admitted), each
-- admitted group taken (owned: debts folded, limit counted) or found busy (skipped if it
-- has a limit), with as many turns as it has due items (at most what is wanted) and as
-- its limit leaves. Then one statement locks each group's oldest due items for its turns
-- (C1 order, FOR UPDATE SKIP LOCKED) and another claims them, rows in turn order. The
-- turns are kept up to the first one whose group got no item for it: its items were
-- spent leases (poisoned, taking no turn: another round deals again) or another claim
-- holds them (the call ends). An owned group's vt becomes max(vt, pool vt) + 1/weight
-- per kept turn, as in version 8; a busy group's kept turns (1/weight each) its debt.
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
    groups_in_turn refcursor;
    la record;                    -- the next group in (vt, grp) order, not admitted yet
    la_ok boolean;
    owned text[] := '{}';         -- groups whose row this call holds
    borrowed text[] := '{}';      -- busy groups this call took turns from ...
    owed float8[] := '{}';        -- ... and the turns it took (sum of 1/weight), in step
    -- The admitted groups of a round, in step: name, weight, vt (effective: with this
    -- round's turns), vt when admitted, owned, turns it may take, turns dealt, items got,
    -- where its items start in t_ids.
    c_grp text[]; c_w float8[]; c_eff float8[]; c_vt0 float8[]; c_mine boolean[];
    c_left integer[]; c_take integer[]; c_got integer[]; c_start integer[];
    n integer;
    seq_i integer[];              -- the round's turns: the group (index) ...
    seq_j integer[];              -- ... and which of its turns
    t_ids bigint[];               -- the items taken, by group then claim order
    t_grps text[];
    p_ids bigint[];               -- spent leases poisoned ...
    p_grps text[];                -- ... and their groups
    used integer;                 -- turns kept
    stop boolean := false;        -- another claim holds items a turn was dealt for
    round_vt float8;              -- the pool's vt when the round began
    seq_pv float8[];              -- the pool's vt after each turn
    out_ids bigint[];
    is_mine boolean;
    m_vt float8; m_weight float8; m_lim integer; m_paused float8;
    cap integer;
    room integer;
    avail integer;
    debt float8;
    eff float8;
    k integer;
    x integer;
    bi integer;
    e integer;
    need integer;
    planned integer;
    served integer := 0;
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
    IF NOT EXISTS (SELECT FROM groups AS gr WHERE gr.pool = p_pool AND gr.grp = '') THEN
        -- The first claims of a pool only: a claim that meets another's uncommitted row waits for it.
        INSERT INTO groups AS gr (pool, grp, live) VALUES (p_pool, '', true) ON CONFLICT DO NOTHING;
    END IF;
    <<rounds>>
    WHILE served < p_limit LOOP
        need := p_limit - served;
        IF settings.pool_limit IS NOT NULL THEN
            need := least(need, settings.pool_limit - (
                SELECT count(*) FROM items AS i
                WHERE i.pool = p_pool AND i.state = 'claimed' AND i.lease_expires_at > at)::integer);
            EXIT rounds WHEN need <= 0;
        END IF;
        planned := 0;
        round_vt := pool_vt;
        <<bands>>
        FOR band IN SELECT b.priority FROM claim_bands AS b WHERE b.pool = p_pool ORDER BY b.priority DESC LOOP
            c_grp := '{}'; c_w := '{}'; c_eff := '{}'; c_vt0 := '{}'; c_mine := '{}';
            c_left := '{}'; c_take := '{}'; c_got := '{}'; c_start := '{}'; n := 0;
            seq_i := '{}'; seq_j := '{}'; seq_pv := '{}';
            OPEN groups_in_turn FOR
                SELECT gr.grp, gr.weight, gr.lim, gr.paused_until, gr.vt FROM groups AS gr
                WHERE gr.pool = p_pool AND gr.live ORDER BY gr.vt, gr.grp;
            FETCH groups_in_turn INTO la;
            la_ok := FOUND;
            <<turns>>
            WHILE planned < need LOOP
                bi := 0;
                FOR x IN 1..n LOOP
                    IF c_take[x] < c_left[x] AND (bi = 0 OR c_eff[x] < c_eff[bi]
                            OR (c_eff[x] = c_eff[bi] AND c_grp[x] < c_grp[bi])) THEN
                        bi := x;
                    END IF;
                END LOOP;
                IF la_ok AND (bi = 0 OR la.vt < c_eff[bi] OR (la.vt = c_eff[bi] AND la.grp < c_grp[bi])) THEN
                    -- The next group in turn order may come first: admit it (or pass it over).
                    <<admit>>
                    BEGIN
                        EXIT admit WHEN la.paused_until > at;
                        IF la.grp = ANY (owned) THEN
                            is_mine := true;
                            m_vt := la.vt; m_weight := la.weight; m_lim := la.lim;
                        ELSE
                            SELECT gr.weight, gr.lim, gr.paused_until, gr.vt INTO m_weight, m_lim, m_paused, m_vt
                            FROM groups AS gr WHERE gr.pool = p_pool AND gr.grp = la.grp FOR UPDATE SKIP LOCKED;
                            is_mine := FOUND;
                            IF is_mine THEN
                                owned := owned || la.grp;
                                -- Debts committed by claims that borrowed turns from it: now its vt.
                                WITH paid AS (
                                    DELETE FROM group_debts AS d WHERE d.pool = p_pool AND d.grp = la.grp RETURNING d.turns
                                ) SELECT sum(paid.turns) INTO debt FROM paid;
                                IF debt IS NOT NULL THEN
                                    UPDATE groups AS gr SET vt = gr.vt + debt WHERE gr.pool = p_pool AND gr.grp = la.grp;
                                    m_vt := m_vt + debt;
                                END IF;
                                EXIT admit WHEN m_paused > at;
                            ELSE
                                m_vt := la.vt; m_weight := la.weight; m_lim := la.lim;
                            END IF;
                        END IF;
                        room := need;
                        cap := CASE WHEN la.grp = '' THEN NULL ELSE coalesce(m_lim, settings.default_limit) END;
                        IF cap IS NOT NULL THEN
                            -- GR6: only the owner counts, after taking the row (this statement's
                            -- snapshot sees every claim of the group committed before, and this
                            -- call's own).
                            EXIT admit WHEN NOT is_mine;
                            room := least(room, cap - (
                                SELECT count(*) FROM items AS i
                                WHERE i.pool = p_pool AND i.grp = la.grp AND i.state = 'claimed'
                                    AND i.lease_expires_at > at)::integer);
                            EXIT admit WHEN room <= 0;
                        END IF;
                        SELECT count(*) INTO avail FROM (
                            SELECT FROM items AS i
                            WHERE i.pool = p_pool AND i.grp = la.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                                AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                            LIMIT room) AS due;
                        IF avail = 0 THEN
                            IF is_mine AND la.grp <> '' AND NOT EXISTS (
                                SELECT FROM items AS i WHERE i.pool = p_pool AND i.grp = la.grp AND i.state IN ('pending', 'claimed')
                            ) THEN
                                -- This call holds the row, taken before this look (a new snapshot): a
                                -- push or requeue that held it first has committed its items, one that
                                -- comes later waits for this commit and sets live again.
                                UPDATE groups AS gr SET live = false WHERE gr.pool = p_pool AND gr.grp = la.grp;
                            END IF;
                            EXIT admit;
                        END IF;
                        eff := m_vt;
                        IF NOT is_mine THEN
                            -- Its turns as far as this call knows: the vt its owner last committed,
                            -- the debts other claims committed since, and this call's own.
                            eff := eff + coalesce((
                                SELECT sum(d.turns) FROM group_debts AS d WHERE d.pool = p_pool AND d.grp = la.grp), 0);
                            k := array_position(borrowed, la.grp);
                            IF k IS NOT NULL THEN
                                eff := eff + owed[k];
                            END IF;
                        END IF;
                        n := n + 1;
                        c_grp[n] := la.grp; c_w[n] := m_weight; c_eff[n] := eff; c_vt0[n] := m_vt;
                        c_mine[n] := is_mine; c_left[n] := avail; c_take[n] := 0; c_got[n] := 0; c_start[n] := 0;
                    END;
                    FETCH groups_in_turn INTO la;
                    la_ok := FOUND;
                    CONTINUE turns;
                END IF;
                EXIT turns WHEN bi = 0;
                planned := planned + 1;
                c_take[bi] := c_take[bi] + 1;
                seq_i[planned] := bi;
                seq_j[planned] := c_take[bi];
                eff := c_eff[bi];
                IF c_mine[bi] THEN
                    c_eff[bi] := greatest(eff, pool_vt) + 1.0 / c_w[bi];
                ELSE
                    c_eff[bi] := eff + 1.0 / c_w[bi];
                END IF;
                pool_vt := greatest(pool_vt, eff);
                seq_pv[planned] := pool_vt;
            END LOOP;
            CLOSE groups_in_turn;
            EXIT bands WHEN planned > 0;
        END LOOP;
        EXIT rounds WHEN planned = 0;
        -- Each group's turns lock its oldest due items (C1 order; SKIP LOCKED: another claim's are
        -- passed over). Spent leases among them are poisoned and take no turn (as claim_items).
        SELECT array_agg(p.id ORDER BY w.grp, p.due, p.id) FILTER (WHERE NOT p.spent),
            array_agg(w.grp ORDER BY w.grp, p.due, p.id) FILTER (WHERE NOT p.spent),
            array_agg(p.id ORDER BY p.due, p.id) FILTER (WHERE p.spent),
            array_agg(w.grp) FILTER (WHERE p.spent)
        INTO t_ids, t_grps, p_ids, p_grps
        FROM unnest(c_grp, c_take) AS w (grp, take)
        CROSS JOIN LATERAL (
            SELECT i.id, (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) AS due,
                (i.state = 'claimed' AND i.attempts >= i.max_attempts) AS spent
            FROM items AS i
            WHERE i.pool = p_pool AND i.grp = w.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
            ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
            LIMIT w.take FOR UPDATE SKIP LOCKED
        ) AS p
        WHERE w.take > 0;
        t_ids := coalesce(t_ids, '{}'); t_grps := coalesce(t_grps, '{}');
        p_ids := coalesce(p_ids, '{}'); p_grps := coalesce(p_grps, '{}');
        e := 0;
        FOR x IN 1..cardinality(t_grps) LOOP
            IF e = 0 OR c_grp[e] <> t_grps[x] THEN
                e := array_position(c_grp, t_grps[x]);
                c_start[e] := x;
            END IF;
            c_got[e] := c_got[e] + 1;
        END LOOP;
        -- The j-th item a group got takes its j-th turn. The turns stop at the first one its group
        -- got no item for, as one-item claims would: the turns after it were dealt as if that
        -- group had taken it. Its items were poisoned: the next round deals again. Another claim
        -- holds them: this call ends here (dealing the turn to the next group in line would
        -- give a group that claim is serving fewer turns than its share).
        out_ids := '{}';
        used := 0;
        FOR x IN 1..planned LOOP
            e := seq_i[x];
            IF seq_j[x] > c_got[e] THEN
                stop := c_got[e] + (SELECT count(*) FROM unnest(p_grps) AS s (g) WHERE s.g = c_grp[e]) < c_take[e];
                pool_vt := CASE WHEN x = 1 THEN round_vt ELSE seq_pv[x - 1] END;
                EXIT;
            END IF;
            out_ids := out_ids || t_ids[c_start[e] + seq_j[x] - 1];
            used := x;
        END LOOP;
        EXIT rounds WHEN used = 0 AND cardinality(p_ids) = 0;
        RETURN QUERY
            WITH updated AS (
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
                WHERE i.id = ANY (p_ids || out_ids)
                RETURNING i.id, i.payload, i.priority, i.attempts, i.max_attempts, i.token, i.created_at, i.available_at,
                    i.lease_expires_at, i.dedup_key, i.error, i.releases, i.state = 'claimed' AS is_taken, i.grp
            )
            SELECT u.id, u.payload, u.priority, u.attempts, u.max_attempts, u.token, u.created_at, u.available_at,
                u.lease_expires_at, u.dedup_key, u.error, u.releases, u.is_taken, u.grp
            FROM unnest(p_ids || out_ids) WITH ORDINALITY AS o (id, n) JOIN updated AS u ON u.id = o.id
            ORDER BY o.n;
        served := served + used;
        -- What each group took: seq_j counts a group's turns, so its last kept turn says how many.
        FOR x IN 1..n LOOP
            c_got[x] := 0;
        END LOOP;
        FOR x IN 1..used LOOP
            c_got[seq_i[x]] := seq_j[x];
        END LOOP;
        FOR x IN 1..n LOOP
            CONTINUE WHEN c_got[x] = 0;
            IF c_mine[x] THEN
                -- Turns dealt but not kept were its last: its vt as after the turns it took.
                UPDATE groups AS gr SET vt = greatest(c_vt0[x], c_eff[x] - (c_take[x] - c_got[x]) / c_w[x])
                WHERE gr.pool = p_pool AND gr.grp = c_grp[x];
            ELSE
                k := array_position(borrowed, c_grp[x]);
                IF k IS NULL THEN
                    borrowed := borrowed || c_grp[x];
                    owed := owed || (c_got[x] / c_w[x]);
                ELSE
                    owed[k] := owed[k] + c_got[x] / c_w[x];
                END IF;
            END IF;
        END LOOP;
        EXIT rounds WHEN stop;
        -- A round that kept every turn it dealt and still wants more found no more in its band:
        -- the next round looks again (the next band, or this one after a poisoned lease).
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
