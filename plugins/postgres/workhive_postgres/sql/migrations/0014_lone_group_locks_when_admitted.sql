-- Schema version 14: the round's only group locks its items when it is admitted (issue 28).
--
-- A group admitted first in a round, with no other in line after it (most claims of a backlog:
-- one tenant's items left), takes as many turns as it has items due, up to the room the claim
-- has. Version 13 counted them (a scan of the group's head, LIMIT room) and then locked as many
-- (a second scan of the same entries). Here the group's items are locked when it is admitted,
-- up to room, and the count runs only when fewer could be locked: then it says, as before, how
-- many are due, items other claims hold included, and the deal and the turns that follow are
-- those of version 13. When room items were locked the count would have said room.
--
-- The next group in line is now fetched one ahead of the one being admitted (the cursor's rows
-- are read in the snapshot it was opened with, so when a row is fetched changes nothing).
--
-- Measured on a private server, one claimer of 256 items at a time with a completion of each
-- claim (100,000 items in one group): 18.3-18.7 us of server CPU an item against 18.9-19.6 with
-- version 13; the ungrouped claim of the same loop 15.5-16.2.
--
-- Otherwise as in version 13.
CREATE OR REPLACE FUNCTION claim_grouped(clock_offset float8, p_pool text, p_worker text, p_lease float8, p_limit integer)
RETURNS TABLE (
    id bigint, payload text, priority integer, attempts integer, max_attempts integer, token bigint,
    created_at float8, available_at float8, lease_expires_at float8, dedup_key text, error text,
    releases integer, taken boolean, grp text, ord bigint
)
LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT
-- See the head of migration 0011: a custom plan per call was chosen, and then costly.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    at float8 := now_s(clock_offset);
    settings group_pools%ROWTYPE;
    pool_vt float8;
    band integer;
    groups_in_turn refcursor;
    la record;                    -- the next group in (vt, grp) order, not admitted yet
    la_ok boolean;
    nx record;                    -- the group in line after it (peeked: is la the last in line?)
    nx_ok boolean;
    pre_ids bigint[];             -- the items locked when a lone group was admitted (see admit)
    owned text[] := '{}';         -- groups whose row this call holds
    borrowed text[] := '{}';      -- busy groups this call took turns from ...
    owed float8[] := '{}';        -- ... and the turns it took (sum of 1/weight), in step
    -- The admitted groups of a round, in step: name, weight, vt (effective: with this
    -- round's turns), vt when admitted, owned, turns it may take, turns dealt, items got,
    -- where its items start in t_ids.
    c_grp text[]; c_w float8[]; c_eff float8[]; c_vt0 float8[]; c_mine boolean[];
    c_left integer[]; c_take integer[]; c_got integer[]; c_start integer[];
    c_low float8[];               -- ... and where its band's entries are read from (its mark)
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
    open_n integer;               -- admitted groups that can still take a turn
    step float8;                  -- 1/weight of the group dealt to
    miss integer;                 -- the first turn whose group got no item for it
    bi integer;
    e integer;
    need integer;
    planned integer;
    served integer := 0;
    capped text[] := '{}';        -- admitted groups with a limit: their claims are counted
    sent bigint := 0;             -- rows returned so far (each row's ord follows on)
    shares boolean := false;      -- a group's row was busy: each group's turns held to its share
    w_sum float8;                 -- the weights of the band's admitted groups
    lifted boolean;               -- ... until no other group can take a turn
    over boolean;                 -- a group that could take a turn has had its share
BEGIN
    -- group_settings_key(p_pool), written out: that function (SET search_path) is never inlined,
    -- and ran as a statement of its own, planned anew on every call.
    PERFORM pg_advisory_xact_lock_shared(hashtextextended('workhive-groups:' || current_schema() || ':' || p_pool, 0));
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
            c_grp := '{}'; c_w := '{}'; c_eff := '{}'; c_vt0 := '{}'; c_mine := '{}'; c_low := '{}';
            c_left := '{}'; c_take := '{}'; c_got := '{}'; c_start := '{}'; n := 0;
            seq_i := '{}'; seq_j := '{}'; seq_pv := '{}';
            w_sum := 0; lifted := false;
            -- With each group, the mark its entries of this band are read from (evaluated for
            -- the rows fetched only): the ungrouped range's in claim_marks, a group's in group_marks.
            OPEN groups_in_turn FOR
                SELECT gr.grp, gr.weight, gr.lim, gr.paused_until, gr.vt, coalesce(CASE WHEN gr.grp = '' THEN (
                        SELECT m.low FROM claim_marks AS m WHERE m.pool = p_pool AND m.priority = band
                        ORDER BY m.n DESC LIMIT 1)
                    ELSE (
                        SELECT m.low FROM group_marks AS m WHERE m.pool = p_pool AND m.grp = gr.grp AND m.priority = band
                        ORDER BY m.n DESC LIMIT 1)
                    END, '-Infinity') AS low
                FROM groups AS gr
                WHERE gr.pool = p_pool AND gr.live ORDER BY gr.vt, gr.grp;
            FETCH groups_in_turn INTO la;
            la_ok := FOUND;
            IF la_ok THEN
                FETCH groups_in_turn INTO nx;
                nx_ok := FOUND;
            ELSE
                nx_ok := false;
            END IF;
            pre_ids := NULL;
            <<turns>>
            WHILE planned < need LOOP
                bi := 0;
                open_n := 0;
                over := false;
                FOR x IN 1..n LOOP
                    CONTINUE WHEN c_take[x] >= c_left[x];
                    open_n := open_n + 1;
                    IF shares AND NOT lifted AND c_take[x] > ceil(need * c_w[x] / (w_sum + CASE WHEN la_ok THEN la.weight ELSE 0 END)) THEN
                        -- It has had its share of the round, and one more turn, among the groups
                        -- admitted and the next in line: that one comes in (below) even if its vt
                        -- is later, or, with none left in line, the shares lift.
                        over := true;
                        CONTINUE;
                    END IF;
                    IF bi = 0 OR c_eff[x] < c_eff[bi] OR (c_eff[x] = c_eff[bi] AND c_grp[x] < c_grp[bi]) THEN
                        bi := x;
                    END IF;
                END LOOP;
                IF bi = 0 AND over AND NOT la_ok THEN
                    -- Every group that can still take a turn has had its share, and no other is
                    -- in line: the rest go by turn order alone.
                    lifted := true;
                    CONTINUE turns;
                END IF;
                IF la_ok AND (bi = 0 OR la.vt < c_eff[bi] OR (la.vt = c_eff[bi] AND la.grp < c_grp[bi])) THEN
                    -- The next group in turn order may come first: admit it (or pass it over).
                    <<admit>>
                    BEGIN
                        EXIT admit WHEN la.paused_until > at;
                        avail := NULL;
                        IF la.grp = '' THEN
                            -- The ungrouped items: live for good, and first in turn order while there are
                            -- none (their vt stays), so every claim meets them. No limit applies to them:
                            -- they are counted before their row is taken, and passed over unlocked when
                            -- none is due (taking the row was a write, and two statements, every claim).
                            SELECT count(*) INTO avail FROM (
                                SELECT FROM items AS i
                                WHERE i.pool = p_pool AND i.grp = '' AND i.priority = band AND i.state IN ('pending', 'claimed')
                                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) >= la.low
                                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                                LIMIT need) AS due;
                            EXIT admit WHEN avail = 0;
                        END IF;
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
                                WHERE i.pool = p_pool AND i.grp = la.grp AND i.state = 'claimed' AND i.counted
                                    AND i.lease_expires_at > at)::integer);
                            EXIT admit WHEN room <= 0;
                        END IF;
                        IF avail IS NULL AND n = 0 AND NOT nx_ok THEN
                            -- The round's only group (none admitted before it, none in line after
                            -- it): its turns are as many as it has due, up to room, and its items
                            -- are the ones locked here, in claim order (as the lock below does
                            -- for one group). Locking them now spares counting them first, the
                            -- count is only needed when fewer than room could be locked: then
                            -- it says, as before, how many are due, others' locked ones included.
                            pre_ids := ARRAY(
                                SELECT CASE WHEN i.state = 'claimed' AND i.attempts >= i.max_attempts THEN -i.id ELSE i.id END
                                FROM items AS i
                                WHERE i.pool = p_pool AND i.grp = la.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) >= la.low
                                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                                ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
                                LIMIT room FOR UPDATE SKIP LOCKED);
                            avail := CASE WHEN cardinality(pre_ids) = room THEN room END;
                        END IF;
                        IF avail IS NULL THEN
                            SELECT count(*) INTO avail FROM (
                                SELECT FROM items AS i
                                WHERE i.pool = p_pool AND i.grp = la.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) >= la.low
                                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                                LIMIT room) AS due;
                        END IF;
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
                        IF NOT is_mine THEN
                            shares := true;
                        END IF;
                        w_sum := w_sum + m_weight;
                        n := n + 1;
                        c_grp[n] := la.grp; c_w[n] := m_weight; c_eff[n] := eff; c_vt0[n] := m_vt;
                        c_mine[n] := is_mine; c_left[n] := avail; c_take[n] := 0; c_got[n] := 0; c_start[n] := 0;
                        c_low[n] := la.low;
                        IF cap IS NOT NULL THEN
                            capped := capped || la.grp;
                        END IF;
                    END;
                    la := nx;
                    la_ok := nx_ok;
                    IF nx_ok THEN
                        FETCH groups_in_turn INTO nx;
                        nx_ok := FOUND;
                    END IF;
                    CONTINUE turns;
                END IF;
                EXIT turns WHEN bi = 0;
                IF open_n = 1 AND NOT la_ok THEN
                    -- No other group can come into turn: the rest of the turns are this group's, as
                    -- many as it can take. Dealt in one step, with the vt sums of the turn-by-turn
                    -- deal below in the same order (the pool's vt after a turn is the greater of it
                    -- and the group's vt before the turn; an owned group then starts from that).
                    k := least(need - planned, c_left[bi] - c_take[bi]);
                    seq_i := seq_i || array_fill(bi, ARRAY[k]);
                    seq_j := seq_j || ARRAY(SELECT generate_series(c_take[bi] + 1, c_take[bi] + k));
                    c_take[bi] := c_take[bi] + k;
                    eff := c_eff[bi];
                    step := 1.0 / c_w[bi];
                    is_mine := c_mine[bi];
                    FOR x IN planned + 1..planned + k LOOP
                        pool_vt := greatest(pool_vt, eff);
                        seq_pv[x] := pool_vt;
                        eff := CASE WHEN is_mine THEN pool_vt ELSE eff END + step;
                    END LOOP;
                    c_eff[bi] := eff;
                    planned := planned + k;
                    EXIT turns;
                END IF;
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
        IF n = 1 THEN
            -- One group, as in most claims of a backlog: its ids come in claim order straight from
            -- the scan, a spent lease's negated (ids are positive), with no aggregate to sort them;
            -- the round's only group was scanned and locked when it was admitted (pre_ids).
            IF pre_ids IS NOT NULL THEN
                t_ids := pre_ids;
            ELSE
                t_ids := ARRAY(
                    SELECT CASE WHEN i.state = 'claimed' AND i.attempts >= i.max_attempts THEN -i.id ELSE i.id END
                    FROM items AS i
                    WHERE i.pool = p_pool AND i.grp = c_grp[1] AND i.priority = band AND i.state IN ('pending', 'claimed')
                        AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) >= c_low[1]
                        AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                    ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
                    LIMIT c_take[1] FOR UPDATE SKIP LOCKED);
            END IF;
            t_grps := '{}'; p_ids := '{}'; p_grps := '{}';
            IF 0 > ANY (t_ids) THEN
                p_ids := ARRAY(SELECT -s.lid FROM unnest(t_ids) WITH ORDINALITY AS s (lid, pos) WHERE s.lid < 0 ORDER BY s.pos);
                t_ids := ARRAY(SELECT s.lid FROM unnest(t_ids) WITH ORDINALITY AS s (lid, pos) WHERE s.lid > 0 ORDER BY s.pos);
                p_grps := array_fill(c_grp[1], ARRAY[cardinality(p_ids)]);
            END IF;
        ELSE
            SELECT array_agg(p.id ORDER BY w.grp, p.due, p.id) FILTER (WHERE NOT p.spent),
                array_agg(w.grp ORDER BY w.grp, p.due, p.id) FILTER (WHERE NOT p.spent),
                array_agg(p.id ORDER BY p.due, p.id) FILTER (WHERE p.spent),
                array_agg(w.grp) FILTER (WHERE p.spent)
            INTO t_ids, t_grps, p_ids, p_grps
            FROM unnest(c_grp, c_take, c_low) AS w (grp, take, low)
            CROSS JOIN LATERAL (
                SELECT i.id, (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) AS due,
                    (i.state = 'claimed' AND i.attempts >= i.max_attempts) AS spent
                FROM items AS i
                WHERE i.pool = p_pool AND i.grp = w.grp AND i.priority = band AND i.state IN ('pending', 'claimed')
                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) >= w.low
                    AND (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END) <= at
                ORDER BY (CASE WHEN i.state = 'pending' THEN i.available_at ELSE i.lease_expires_at END), i.id
                LIMIT w.take FOR UPDATE SKIP LOCKED
            ) AS p
            WHERE w.take > 0;
            t_ids := coalesce(t_ids, '{}'); t_grps := coalesce(t_grps, '{}');
            p_ids := coalesce(p_ids, '{}'); p_grps := coalesce(p_grps, '{}');
        END IF;
        -- The j-th item a group got takes its j-th turn. The turns stop at the first one its group
        -- got no item for, as one-item claims would: the turns after it were dealt as if that
        -- group had taken it. Its items were poisoned: the next round deals again. Another claim
        -- holds them: this call ends here (dealing the turn to the next group in line would
        -- give a group that claim is serving fewer turns than its share).
        IF n = 1 THEN
            -- One group: its j-th turn is the round's j-th, its j-th item t_ids[j].
            c_got[1] := cardinality(t_ids);
            used := least(planned, c_got[1]);
            miss := CASE WHEN used < planned THEN used + 1 END;
            out_ids := t_ids[1:used];
        ELSE
            e := 0;
            FOR x IN 1..cardinality(t_grps) LOOP
                IF e = 0 OR c_grp[e] <> t_grps[x] THEN
                    e := array_position(c_grp, t_grps[x]);
                    c_start[e] := x;
                END IF;
                c_got[e] := c_got[e] + 1;
            END LOOP;
            out_ids := '{}';
            miss := NULL;
            used := planned;
            FOR x IN 1..planned LOOP
                e := seq_i[x];
                IF seq_j[x] > c_got[e] THEN
                    miss := x;
                    used := x - 1;
                    EXIT;
                END IF;
                -- In place (an expanded array), not `out_ids || id`: a copy of the array per item.
                out_ids[x] := t_ids[c_start[e] + seq_j[x] - 1];
            END LOOP;
        END IF;
        IF miss IS NOT NULL THEN
            e := seq_i[miss];
            stop := c_got[e] + (SELECT count(*) FROM unnest(p_grps) AS s (g) WHERE s.g = c_grp[e]) < c_take[e];
            pool_vt := CASE WHEN miss = 1 THEN round_vt ELSE seq_pv[miss - 1] END;
        END IF;
        EXIT rounds WHEN used = 0 AND cardinality(p_ids) = 0;
        -- Rows come back in any order, each with its place (ord): the caller sorts them. Ordering
        -- them here took a CTE, a join and a sort, copied into the function's result.
        RETURN QUERY
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
                    finished_at = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN i.finished_at ELSE at END,
                    counted = CASE WHEN i.state = 'pending' OR i.attempts < i.max_attempts THEN i.grp = ANY (capped) ELSE i.counted END
            FROM unnest(p_ids || out_ids) WITH ORDINALITY AS o (id, n)
            WHERE i.id = o.id
            RETURNING i.id, i.payload, i.priority, i.attempts, i.max_attempts, i.token, i.created_at, i.available_at,
                i.lease_expires_at, i.dedup_key, i.error, i.releases, i.state = 'claimed', i.grp, sent + o.n;
        sent := sent + cardinality(p_ids) + used;
        served := served + used;
        -- What each group took: seq_j counts a group's turns, so its last kept turn says how many.
        IF n = 1 THEN
            c_got[1] := used;
        ELSE
            FOR x IN 1..n LOOP
                c_got[x] := 0;
            END LOOP;
            FOR x IN 1..used LOOP
                c_got[seq_i[x]] := seq_j[x];
            END LOOP;
        END IF;
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
