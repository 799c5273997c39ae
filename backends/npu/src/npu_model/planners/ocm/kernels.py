"""The kernels of the OCM options and the walk order they build on: lifetime conflict lists (numpy),
the offset search, the refill pass and the score total; OPTION1's improvement passes (eject
search, repack repair, iterated local search), OPTION2's beam and OPTION3's evicting walk.

One module because these kernels call each other: Numba's on-disk cache of a kernel is
invalidated only by changes to the kernel's own file, so Numba kernels that call each other live
in one file. The options' modules hold the Python drivers.

Buffers are indexed 0..n-1; ``offsets[i] = -1`` means not resident. ``adj_ptr``, ``adj_idx`` list,
for each buffer, the other buffers whose lifetimes intersect its own (CSR)."""

from __future__ import annotations

import numpy as np

from ...kernels.jit import helper, kernel


def _conflicts(starts, ends):
    """CSR lists of lifetime-intersecting pairs (i != j), each list in index order.

    Plain numpy (runs once per plan), in blocks of rows so memory stays O(block * n)."""
    n = starts.shape[0]
    cnt = np.zeros(n + 1, np.int64)
    parts = []
    for r0 in range(0, n, _CONFLICT_ROWS):
        r1 = min(n, r0 + _CONFLICT_ROWS)
        hit = (starts[r0:r1, None] <= ends[None, :]) & (starts[None, :] <= ends[r0:r1, None])
        hit[np.arange(r1 - r0), np.arange(r0, r1)] = False
        cnt[r0 + 1:r1 + 1] = hit.sum(axis=1)
        parts.append(np.nonzero(hit)[1].astype(np.int64))
    np.cumsum(cnt, out=cnt)
    idx = np.concatenate(parts) if parts else np.empty(0, np.int64)
    return cnt, idx


_CONFLICT_ROWS = 1024


@helper
def _argsort2(k1, k2, n):
    """Stable ascending order of entries 0..n-1 by (k1 float64, k2 int64): what two stable
    ``np.argsort`` passes give, without compiling Numba's generic mergesort (seconds of a cold
    start). Insertion sort of runs of 16, then bottom-up merges. Callers pass `n` as
    ``np.int64`` so that no literal-typed specialisation is compiled besides."""
    src = np.empty(n, np.int64)  # not np.arange: its implementation is one more compile
    for i in range(n):
        src[i] = i
    dst = np.empty(n, np.int64)
    for s in range(0, n, 16):
        e = min(s + 16, n)
        for i in range(s + 1, e):
            v = src[i]
            j = i
            while j > s and (k1[src[j - 1]] > k1[v] or
                             (k1[src[j - 1]] == k1[v] and k2[src[j - 1]] > k2[v])):
                src[j] = src[j - 1]
                j -= 1
            src[j] = v
    width = 16
    while width < n:
        for s in range(0, n, 2 * width):
            mid = min(s + width, n)
            e = min(s + 2 * width, n)
            i = s
            j = mid
            k = s
            while i < mid and j < e:
                a = src[i]
                b = src[j]
                if k1[b] < k1[a] or (k1[b] == k1[a] and k2[b] < k2[a]):
                    dst[k] = b
                    j += 1
                else:
                    dst[k] = a
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < e:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    return src


@helper
def _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, mode):
    """An offset for buffer `u` among the placed buffers that are live with it, or -1.

    mode 0: best fit (the smallest gap that holds it, lowest address on ties; TFLite's arena
    planner rule); mode 1: the highest address that holds it (packs from the top). Callers pass
    the mode as ``np.int64``: a bare constant would compile one literal specialisation each."""
    a, b = adj_ptr[u], adj_ptr[u + 1]
    lo = np.empty(b - a, np.int64)
    hi = np.empty(b - a, np.int64)
    k = 0
    for t in range(a, b):
        j = adj_idx[t]
        if offsets[j] >= 0:
            x = offsets[j]
            y = x + sizes[j]
            q = k  # insertion by offset, after equal ones (a stable sort)
            while q > 0 and lo[q - 1] > x:
                lo[q] = lo[q - 1]
                hi[q] = hi[q - 1]
                q -= 1
            lo[q] = x
            hi[q] = y
            k += 1
    s = sizes[u]
    best = -1
    best_gap = capacity + 1
    cur = 0
    for t in range(k + 1):
        if t < k:
            nxt = lo[t]
        else:
            nxt = capacity
        if nxt > cur:
            gap = nxt - cur
            if gap >= s:
                if mode == 0:
                    if gap < best_gap:
                        best_gap = gap
                        best = cur
                else:
                    best = nxt - s
        if t < k and hi[t] > cur:
            cur = hi[t]
    return best


@kernel
def _refill(order, sizes, eligible, offsets, adj_ptr, adj_idx, capacity):
    """Greedy pass: every eligible non-resident buffer, in `order`, gets a best-fit offset if
    one exists. Returns the number added."""
    added = 0
    for t in range(order.shape[0]):
        u = order[t]
        if offsets[u] < 0 and eligible[u]:
            o = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, np.int64(0))
            if o >= 0:
                offsets[u] = o
                added += 1
    return added


@kernel
def _total(scores, offsets):
    """Summed score of the resident buffers."""
    s = 0.0
    for i in range(offsets.shape[0]):
        if offsets[i] >= 0:
            s += scores[i]
    return s


def _walk_order(starts, ends):
    """Execution order of the buffers (by start, then end, then index): OPTION2's and OPTION3's
    walk."""
    n = starts.shape[0]
    return np.lexsort((np.arange(n), ends, starts)).astype(np.int64)


@kernel
def _eject_search(order, sizes, scores, eligible, offsets, adj_ptr, adj_idx, capacity,
                  max_moves):
    """Local search: insert a missing buffer at the address where the live residents it
    overlaps score least, if they score less than it; evict those, refill, repeat until no
    move gains. Every move strictly raises the total, so it ends. Returns the moves made."""
    moves = 0
    improved = True
    while improved and moves < max_moves:
        improved = False
        for t in range(order.shape[0]):
            u = order[t]
            if offsets[u] >= 0 or not eligible[u]:
                continue
            su = sizes[u]
            a, b = adj_ptr[u], adj_ptr[u + 1]
            ncand = 2
            for q in range(a, b):
                if offsets[adj_idx[q]] >= 0:
                    ncand += 2
            cand = np.empty(ncand, np.int64)
            cand[0] = 0
            cand[1] = capacity - su
            c = 2
            for q in range(a, b):
                j = adj_idx[q]
                if offsets[j] >= 0:
                    cand[c] = offsets[j] + sizes[j]
                    cand[c + 1] = offsets[j] - su
                    c += 2
            best_gain = 0.0
            best_o = -1
            for ci in range(ncand):
                o = cand[ci]
                if o < 0 or o + su > capacity:
                    continue
                loss = 0.0
                for q in range(a, b):
                    j = adj_idx[q]
                    oj = offsets[j]
                    if oj >= 0 and oj < o + su and oj + sizes[j] > o:
                        loss += scores[j]
                        if loss >= scores[u]:
                            break
                gain = scores[u] - loss
                if gain > best_gain * (1.0 + 1e-12) + 1e-9:
                    best_gain = gain
                    best_o = o
            if best_o >= 0:
                for q in range(a, b):
                    j = adj_idx[q]
                    oj = offsets[j]
                    if oj >= 0 and oj < best_o + su and oj + sizes[j] > best_o:
                        offsets[j] = -1
                offsets[u] = best_o
                _refill(order, sizes, eligible, offsets, adj_ptr, adj_idx, capacity)
                moves += 1
                improved = True
                if moves >= max_moves:
                    break
    return moves


@kernel
def _repack_search(order, pack_orders, sizes, scores, eligible, offsets, adj_ptr, adj_idx,
                   capacity):
    """Repair pass: a missing buffer is added if the residents plus it can be packed again from
    scratch (best fit, in one of the `pack_orders`: start, size, lifetime). Finds layouts the
    incremental passes cannot reach, where making room needs moving many residents a little.
    Returns the buffers added."""
    n = sizes.shape[0]
    tmp = np.empty(n, np.int64)
    added = 0
    for t in range(order.shape[0]):
        u = order[t]
        if offsets[u] >= 0 or not eligible[u]:
            continue
        if _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, np.int64(0)) >= 0:
            offsets[u] = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, np.int64(0))
            added += 1
            continue
        for r in range(pack_orders.shape[0]):
            for i in range(n):
                tmp[i] = -1
            ok = True
            for q in range(n):
                i = pack_orders[r, q]
                if offsets[i] >= 0 or i == u:
                    o = _fit(i, sizes, tmp, adj_ptr, adj_idx, capacity, np.int64(0))
                    if o < 0:
                        ok = False
                        break
                    tmp[i] = o
            if ok:
                for i in range(n):
                    offsets[i] = tmp[i]
                added += 1
                break
    return added


@helper
def _rand(x):
    """Park-Miller style LCG step in [0, 2^31): the same sequence with and without the JIT."""
    return (x * 1103515245 + 12345) % 2147483648


@kernel
def _perturb_search(order, sizes, scores, starts, ends, eligible, offsets, adj_ptr, adj_idx,
                    capacity, iters, seed, max_moves):
    """Iterated local search from `offsets` (modified in place to the best plan found): drop
    part of the residents live with a random buffer, refill in the key order or a random order,
    eject-search; keep the trial if it scores at least as well (plateaus are walked)."""
    n = sizes.shape[0]
    cand = np.empty(n, np.int64)
    nc = 0
    for i in range(n):
        if eligible[i]:
            cand[nc] = i
            nc += 1
    if nc == 0 or iters <= 0:
        return 0
    cur = offsets.copy()
    cur_s = _total(scores, cur)
    best_s = cur_s
    trial = cur.copy()
    perm = order.copy()
    x = (seed % 2147483647) + 1
    for _ in range(iters):
        for i in range(n):
            trial[i] = cur[i]
        x = _rand(x)
        p = cand[x % nc]
        x = _rand(x)
        keep_pct = x % 60  # drop each overlapping resident with probability 40..100 %
        a, b = adj_ptr[p], adj_ptr[p + 1]
        for q in range(a, b):
            j = adj_idx[q]
            if trial[j] >= 0:
                x = _rand(x)
                if x % 100 >= keep_pct:
                    trial[j] = -1
        if trial[p] >= 0:
            trial[p] = -1
        x = _rand(x)
        if x % 2 == 0:
            for i in range(n):
                perm[i] = order[i]
        else:
            for i in range(n):
                perm[i] = order[i]
            for i in range(n - 1, 0, -1):  # Fisher-Yates
                x = _rand(x)
                k = x % (i + 1)
                tmp = perm[i]
                perm[i] = perm[k]
                perm[k] = tmp
        # the pivot first: the point of the move is to try it with a different neighbourhood
        offs_p = _fit(p, sizes, trial, adj_ptr, adj_idx, capacity, np.int64(0))
        if offs_p >= 0:
            trial[p] = offs_p
        _refill(perm, sizes, eligible, trial, adj_ptr, adj_idx, capacity)
        _eject_search(perm, sizes, scores, eligible, trial, adj_ptr, adj_idx, capacity,
                      max_moves)
        s = _total(scores, trial)
        if s >= cur_s * (1.0 - 1e-12):
            for i in range(n):
                cur[i] = trial[i]
            cur_s = s
            if s > best_s * (1.0 + 1e-12):
                best_s = s
                for i in range(n):
                    offsets[i] = cur[i]
    return 0


@kernel
def _beam(order, sizes, scores, starts, ends, eligible, adj_ptr, adj_idx, capacity, top_m):
    """OPTION2: dynamic programming along the execution order keeping the top `top_m` states.

    A state is the offset vector of the buffers decided so far. At each buffer a state branches
    into: leave it in ETM, place it best-fit, place it at the highest address. Children are
    ranked by score (ties: lower peak address of the buffers still live), states equal on the
    buffers still live are merged (the better-scored survives), and the top M are kept."""
    n = sizes.shape[0]
    cur = np.empty((top_m, n), np.int64)  # filled with -1 (np.full is one more compile)
    nxt = np.empty((top_m, n), np.int64)
    for p in range(top_m):
        for j in range(n):
            cur[p, j] = -1
            nxt[p, j] = -1
    cur_score = np.empty(top_m)  # only cur_score[0] is read before it is written
    cur_score[0] = 0.0
    ncur = 1
    nxt_score = np.empty(top_m)
    ch_parent = np.empty(3 * top_m, np.int64)
    ch_off = np.empty(3 * top_m, np.int64)
    ch_score = np.empty(3 * top_m)
    ch_peak = np.empty(3 * top_m, np.int64)
    live = np.empty(n, np.int64)
    for t in range(order.shape[0]):
        u = order[t]
        if not eligible[u]:
            continue
        # buffers decided so far that are still live at starts[u] (the part the future sees)
        nl = 0
        for q in range(t):
            j = order[q]
            if eligible[j] and ends[j] >= starts[u]:
                live[nl] = j
                nl += 1
        nch = 0
        for p in range(ncur):
            peak = 0
            for q in range(nl):
                j = live[q]
                if cur[p, j] >= 0 and cur[p, j] + sizes[j] > peak:
                    peak = cur[p, j] + sizes[j]
            ch_parent[nch] = p
            ch_off[nch] = -1
            ch_score[nch] = cur_score[p]
            ch_peak[nch] = peak
            nch += 1
            o0 = _fit(u, sizes, cur[p], adj_ptr, adj_idx, capacity, np.int64(0))
            if o0 >= 0:
                ch_parent[nch] = p
                ch_off[nch] = o0
                ch_score[nch] = cur_score[p] + scores[u]
                ch_peak[nch] = max(peak, o0 + sizes[u])
                nch += 1
                o1 = _fit(u, sizes, cur[p], adj_ptr, adj_idx, capacity, np.int64(1))
                if o1 >= 0 and o1 != o0:
                    ch_parent[nch] = p
                    ch_off[nch] = o1
                    ch_score[nch] = cur_score[p] + scores[u]
                    ch_peak[nch] = max(peak, o1 + sizes[u])
                    nch += 1
        # rank: score descending, then peak ascending (stable two-pass sort)
        neg = np.empty(nch)
        for q in range(nch):
            neg[q] = -ch_score[q]
        rank = _argsort2(neg, ch_peak, np.int64(nch))
        nn = 0
        for q in range(nch):
            c = rank[q]
            p = ch_parent[c]
            # merge with an already kept state equal on the live buffers and on u
            dup = False
            for r in range(nn):
                if nxt[r, u] != ch_off[c]:
                    continue
                same = True
                for z in range(nl):
                    j = live[z]
                    if nxt[r, j] != cur[p, j]:
                        same = False
                        break
                if same:
                    dup = True
                    break
            if dup:
                continue
            for j in range(n):
                nxt[nn, j] = cur[p, j]
            nxt[nn, u] = ch_off[c]
            nxt_score[nn] = ch_score[c]
            nn += 1
            if nn == top_m:
                break
        cur, nxt = nxt, cur
        cur_score, nxt_score = nxt_score, cur_score
        ncur = nn
    best = 0
    for p in range(1, ncur):
        if cur_score[p] > cur_score[best]:
            best = p
    return cur[best].copy()


@kernel
def _evict_walk(order, sizes, scores, eligible, offsets, adj_ptr, adj_idx, capacity):
    """OPTION3: walk `order`; a buffer that does not fit evicts the first (in walk order)
    live residents that score lower than it, one at a time, until it fits. The eviction is
    rolled back if it would not fit after all, or would cost as much score as it brings."""
    n = sizes.shape[0]
    rank = np.empty(n, np.int64)
    for t in range(n):
        rank[order[t]] = t
    for t in range(n):
        u = order[t]
        if not eligible[u]:
            continue
        o = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, np.int64(0))
        if o >= 0:
            offsets[u] = o
            continue
        a, b = adj_ptr[u], adj_ptr[u + 1]
        # live residents scoring lower, in walk order
        m = 0
        for q in range(a, b):
            j = adj_idx[q]
            if offsets[j] >= 0 and scores[j] < scores[u]:
                m += 1
        if m == 0:
            continue
        victims = np.empty(m, np.int64)  # in walk order: insertion by rank (ranks are unique)
        m = 0
        for q in range(a, b):
            j = adj_idx[q]
            if offsets[j] >= 0 and scores[j] < scores[u]:
                z = m
                while z > 0 and rank[victims[z - 1]] > rank[j]:
                    victims[z] = victims[z - 1]
                    z -= 1
                victims[z] = j
                m += 1
        saved = np.empty(m, np.int64)
        lost = 0.0
        placed = -1
        k = 0
        while k < m:
            j = victims[k]
            saved[k] = offsets[j]
            offsets[j] = -1
            lost += scores[j]
            k += 1
            if lost >= scores[u]:
                break
            o = _fit(u, sizes, offsets, adj_ptr, adj_idx, capacity, np.int64(0))
            if o >= 0:
                placed = o
                break
        if placed >= 0:
            offsets[u] = placed
        else:
            for q in range(k):
                offsets[victims[q]] = saved[q]
    return 0
