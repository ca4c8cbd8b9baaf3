"""A list-schedule model of the flash kernels' grids: CTAs start in grid order on the first free multiprocessor, each
taking its steps (query tiles x heads of its group, backward; key tiles, forward) plus 2 steps of fixed cost. Prints
the makespan over the ideal (total work / slots) for the grid with the tile fastest, the longest first across the
whole grid, and, for the backward, chunks of C (batch, key/value head) pairs with each chunk's longest CTAs first."""
import heapq


def makespan(durations, slots, overhead=2):
    free = [0.0] * slots
    end = 0.0
    for d in durations:
        t = heapq.heappop(free) + d + overhead
        end = max(end, t)
        heapq.heappush(free, t)
    return end


print("backward (128 keys a CTA, 64-row query tiles, 132 multiprocessors, one CTA each)")
for B, KV, T, G in [(4, 8, 4096, 4), (8, 8, 2048, 4), (16, 8, 1024, 4), (4, 12, 4096, 1), (8, 12, 2048, 1), (16, 12, 1024, 1)]:
    tiles, q_tiles, pairs = T // 128, T // 64, B * KV
    steps = [G * (q_tiles - 2 * j) for j in range(tiles)]
    ideal = (sum(steps) + 2 * tiles) * pairs / 132
    out = []
    for C in sorted({c for c in [1, 2, 4, 8, 16, 32, 64, 128] if c < pairs} | {132 // tiles, pairs}):
        order = [steps[j] for c0 in range(0, pairs, C) for j in range(tiles) for _ in range(c0, min(pairs, c0 + C))]
        out.append("C%d %.3f" % (C, makespan(order, 132) / ideal))
    print(f"{B}x{T}x{KV * G}x{KV}: tile fastest = C1, longest first = C{pairs}, the default C{132 // tiles}:", " ".join(out))

print("forward (128 query rows a CTA; 128-key tiles and 132 slots at head size 128, 64-key tiles and 264 at 64)")
for B, H, T, D in [(4, 32, 4096, 128), (8, 32, 2048, 128), (16, 32, 1024, 128), (4, 32, 4096, 64), (4, 12, 4096, 64), (16, 12, 1024, 64)]:
    keys, slots = (128, 132) if D == 128 else (64, 264)
    q_tiles = T // 128
    work = [(q * 128 + 127) // keys + 1 for q in range(q_tiles)][::-1]  # longest first within a head
    fastest = [w for _ in range(B * H) for w in work]
    longest = [w for w in work for _ in range(B * H)]
    ideal = (sum(fastest) + 2 * len(fastest)) / slots
    print(f"{B}x{T}x{H}, D {D}: tile fastest %.3f, longest first %.3f" % (makespan(fastest, slots) / ideal, makespan(longest, slots) / ideal))
