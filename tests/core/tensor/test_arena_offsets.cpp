// The offsets a reusing capture arena hands out (core/tensor/arena_offsets.h), against a model of the block kept
// here: requests rounded to the alignment, a freed block reused by a later request that fits (the smallest such),
// neighbours merged when given back, a free block at the end grown instead of leaving a hole, a full arena refusing,
// and a random sequence of takes and frees that never overlaps two live blocks and stays within the capacity.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/tensor/arena_offsets.h"

namespace retort {
namespace {

TEST(ArenaOffsets, RoundsReusesAndMerges) {
  ArenaOffsets a(4096, 256);
  EXPECT_EQ(a.take(1), 0u);      // rounded to 256
  EXPECT_EQ(a.take(300), 256u);  // 512 bytes
  EXPECT_EQ(a.take(256), 768u);  // 256 bytes
  EXPECT_EQ(a.high_water(), 1024u);
  a.give_back(256, 300);         // a hole of 512 at 256
  EXPECT_EQ(a.take(200), 256u);  // best fit: the hole
  EXPECT_EQ(a.take(256), 512u);  // the rest of it
  EXPECT_EQ(a.high_water(), 1024u);
  a.give_back(0, 1);
  a.give_back(256, 200);
  a.give_back(512, 256);  // merges with both neighbours into [0, 768)
  EXPECT_EQ(a.take(768), 0u);
  EXPECT_EQ(a.in_use(), 1024u);
}

TEST(ArenaOffsets, PicksTheSmallestFreeBlockThatFits) {
  ArenaOffsets a(1 << 20, 256);
  const size_t x = *a.take(1024), keep1 = *a.take(256), y = *a.take(512), keep2 = *a.take(256);
  (void)keep1, (void)keep2;
  a.give_back(x, 1024);
  a.give_back(y, 512);
  EXPECT_EQ(a.take(400), y);  // 512 fits more tightly than 1024
  EXPECT_EQ(a.take(1000), x);
}

TEST(ArenaOffsets, GrowsAFreeBlockAtTheEndAndRefusesWhenFull) {
  ArenaOffsets a(2048, 256);
  const size_t first = *a.take(512), last = *a.take(512);
  EXPECT_EQ(first, 0u);
  a.give_back(last, 512);         // free [512, 1024) ends where the untouched space begins
  EXPECT_EQ(a.take(1024), 512u);  // grows it to [512, 1536) instead of starting at 1024
  EXPECT_EQ(a.high_water(), 1536u);
  EXPECT_FALSE(a.take(1024).has_value());  // 512 left
  EXPECT_EQ(a.take(512), 1536u);
}

TEST(ArenaOffsets, RandomTakesAndFreesNeverOverlap) {
  constexpr size_t kCapacity = 1 << 22, kAlign = 256;
  ArenaOffsets a(kCapacity, kAlign);
  std::mt19937 rng(5);
  struct Block {
    size_t offset, size;
  };
  std::vector<Block> live;
  for (int i = 0; i < 5000; ++i) {
    if (!live.empty() && rng() % 2 == 0) {
      const size_t k = rng() % live.size();
      a.give_back(live[k].offset, live[k].size);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    const size_t size = 1 + rng() % 20000;
    const auto offset = a.take(size);
    if (!offset) continue;
    ASSERT_EQ(*offset % kAlign, 0u);
    ASSERT_LE(*offset + size, kCapacity);
    for (const Block& b : live)
      ASSERT_TRUE(*offset + size <= b.offset || b.offset + b.size <= *offset)
          << "block at " << *offset << " of " << size << " overlaps one at " << b.offset << " of " << b.size;
    live.push_back({*offset, size});
  }
  size_t total = 0;
  for (const Block& b : live) total += (b.size + kAlign - 1) / kAlign * kAlign;
  EXPECT_EQ(a.in_use(), total);
}

}  // namespace
}  // namespace retort
