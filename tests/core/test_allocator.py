"""The caching allocator's model against sequences whose outcome follows by hand from PyTorch's
``c10/cuda/CUDACachingAllocator.cpp`` (the rules are listed, with their functions, in `app.core.allocator`)."""

from __future__ import annotations

import random

import pytest

from app.core.allocator import Block, CachingAllocator, OutOfMemory, round_size, segment_size

KIB, MIB = 1 << 10, 1 << 20


def test_sizes_round_to_512_bytes():
    # round_size: at least kMinBlockSize (512), else kMinBlockSize * ceil(size / kMinBlockSize)
    assert [round_size(n) for n in (1, 512, 513, 4096, 4097)] == [512, 512, 1024, 4096, 4608]


def test_segment_sizes():
    # get_allocation_size: <= kSmallSize (1 MiB) -> kSmallBuffer (2 MiB); < kMinLargeAlloc (10 MiB) -> kLargeBuffer
    # (20 MiB); else rounded up to kRoundLarge (2 MiB)
    assert segment_size(512) == 2 * MIB
    assert segment_size(MIB) == 2 * MIB
    assert segment_size(MIB + 512) == 20 * MIB
    assert segment_size(10 * MIB - 512) == 20 * MIB
    assert segment_size(10 * MIB) == 10 * MIB
    assert segment_size(10 * MIB + 512) == 12 * MIB


def test_small_tensors_share_a_2_mib_segment():
    # Four 512 KiB tensors: the first takes a new 2 MiB segment and is split (1.5 MiB left >= 512 B), the next
    # three are cut from the remainder; the fifth needs a second segment.
    allocator = CachingAllocator()
    for _ in range(4):
        allocator.malloc(512 * KIB)
    assert allocator.reserved == 2 * MIB and allocator.allocated == 2 * MIB
    allocator.malloc(1)
    assert allocator.reserved == 4 * MIB and allocator.allocated == 2 * MIB + 512


def test_medium_tensors_share_a_20_mib_segment():
    # A 4 MiB tensor takes a 20 MiB segment, split since 16 MiB > kSmallSize remain; five fit, a sixth does not.
    allocator = CachingAllocator()
    for _ in range(5):
        allocator.malloc(4 * MIB)
    assert allocator.reserved == 20 * MIB
    allocator.malloc(4 * MIB)
    assert allocator.reserved == 40 * MIB


def test_a_large_block_is_not_split_for_a_remainder_of_one_mib_or_less():
    # should_split in the large pool: remaining > kSmallSize. 12 MiB cached, 11 MiB asked: 1 MiB would remain,
    # so the whole 12 MiB block is handed out (memory_allocated counts the block).
    allocator = CachingAllocator()
    allocator.free(allocator.malloc(12 * MIB))
    allocator.malloc(11 * MIB)
    assert allocator.reserved == 12 * MIB and allocator.allocated == 12 * MIB


def test_best_fit_takes_the_smallest_cached_block_that_holds_the_request():
    # get_free_block: lower_bound over (size, address): with 30 MiB and 12 MiB cached, 11.5 MiB takes the 12.
    allocator = CachingAllocator()
    big, small = allocator.malloc(30 * MIB), allocator.malloc(12 * MIB)
    allocator.free(big)
    allocator.free(small)
    allocator.malloc(11 * MIB + 512 * KIB)
    allocator.malloc(30 * MIB)
    assert allocator.reserved == 42 * MIB


def test_free_blocks_of_different_segments_do_not_merge():
    # Two 100 MiB tensors are two segments; freed, neither holds 150 MiB, so a third segment is made.
    allocator = CachingAllocator()
    first, second = allocator.malloc(100 * MIB), allocator.malloc(100 * MIB)
    allocator.free(first)
    allocator.free(second)
    allocator.malloc(150 * MIB)
    assert allocator.reserved == 350 * MIB and allocator.max_reserved == 350 * MIB


def test_free_neighbours_in_a_segment_merge():
    # free_block merges a freed block with free neighbours: two adjacent 4 MiB blocks of a 20 MiB segment make
    # room for an 8 MiB tensor without a new segment.
    allocator = CachingAllocator()
    handles = [allocator.malloc(4 * MIB) for _ in range(5)]
    allocator.free(handles[1])
    allocator.free(handles[2])
    allocator.malloc(8 * MIB)
    assert allocator.reserved == 20 * MIB


def test_the_cache_is_released_before_out_of_memory():
    # malloc: no cached block and no room for a segment -> release_cached_blocks (wholly free segments back to the
    # driver), then alloc_block once more; then out of memory.
    allocator = CachingAllocator(limit=300 * MIB)
    allocator.free(allocator.malloc(200 * MIB))
    allocator.malloc(250 * MIB)
    assert allocator.reserved == 250 * MIB
    with pytest.raises(OutOfMemory):
        allocator.malloc(100 * MIB)


def test_a_split_segment_is_not_released():
    # release_cached_blocks returns only blocks that are whole segments (no prev, no next): a 20 MiB segment with
    # one 4 MiB tensor still in it stays.
    allocator = CachingAllocator(limit=40 * MIB)
    keep = allocator.malloc(4 * MIB)
    allocator.free(allocator.malloc(4 * MIB))
    with pytest.raises(OutOfMemory):
        allocator.malloc(24 * MIB)
    allocator.free(keep)
    allocator.malloc(24 * MIB)
    assert allocator.reserved == 24 * MIB


def test_expandable_segments_grow_one_segment_by_pages():
    # expandable_segments: the large pool's segment maps 20 MiB pages at its end. Two 100 MiB tensors lie side by
    # side in it; freed, they merge, and 150 MiB fits in them: 200 MiB reserved where the default needs 350.
    allocator = CachingAllocator("expandable-segments")
    first, second = allocator.malloc(100 * MIB), allocator.malloc(100 * MIB)
    assert allocator.reserved == 200 * MIB
    allocator.free(first)
    allocator.free(second)
    allocator.malloc(150 * MIB)
    assert allocator.reserved == 200 * MIB


def test_expandable_segments_extend_a_free_block_at_the_end():
    # A free 40 MiB block at the segment's end and 70 MiB asked: only the 30 MiB lacking is mapped (two pages).
    allocator = CachingAllocator("expandable-segments")
    allocator.malloc(20 * MIB)
    allocator.free(allocator.malloc(40 * MIB))
    allocator.malloc(70 * MIB)
    assert allocator.reserved == 100 * MIB


def test_expandable_segments_map_a_gap_and_the_free_block_after_it():
    # find_expandable_block counts the free blocks after an unmapped gap too, and map_block merges the new pages with
    # both neighbours (CUDACachingAllocator.cpp at 076f0279, 3428-3434 and 3514-3515). 15, 50 and 15 MiB in 20 MiB
    # pages; the 50 MiB freed and the cache released unmaps its two whole pages (20-60 MiB), leaving 5 MiB free
    # either side: 48 MiB then fits in 5 + 40 + 5 with the gap mapped, 80 MiB reserved, not 100 with 60 more at
    # the end.
    allocator = CachingAllocator("expandable-segments")
    allocator.malloc(15 * MIB)
    middle = allocator.malloc(50 * MIB)
    allocator.malloc(15 * MIB)
    allocator.free(middle)
    allocator.release_cache()
    assert allocator.reserved == 40 * MIB
    allocator.malloc(48 * MIB)
    assert allocator.reserved == 80 * MIB


def test_expandable_segments_unmap_free_pages_under_pressure():
    allocator = CachingAllocator("expandable-segments", limit=200 * MIB)
    low, high = allocator.malloc(100 * MIB), allocator.malloc(60 * MIB)
    allocator.free(low)
    allocator.malloc(140 * MIB)  # 100 MiB free + 40 lacking > the limit: the free pages are unmapped, then mapped
    assert allocator.reserved == 200 * MIB
    allocator.free(high)


@pytest.mark.parametrize("kind", ["default", "expandable-segments"])
def test_accounting_holds_under_random_sequences(kind):
    """Allocated bytes are the sum of live blocks; reserved covers them; freeing everything and releasing the
    cache returns every byte."""
    rng = random.Random(7)
    allocator = CachingAllocator(kind)
    live: dict[Block, int] = {}
    for _ in range(3000):
        if live and rng.random() < 0.45:
            handle = rng.choice(list(live))
            allocator.free(handle)
            del live[handle]
        else:
            size = rng.choice([rng.randrange(1, 2 * KIB), rng.randrange(1, 2 * MIB), rng.randrange(1, 64 * MIB)])
            live[allocator.malloc(size)] = size
        assert allocator.allocated <= allocator.reserved <= allocator.max_reserved
        assert allocator.allocated >= sum(live.values())
    for handle in list(live):
        allocator.free(handle)
    assert allocator.allocated == 0
    allocator.release_cache()
    if kind == "default":
        assert allocator.reserved == 0


def test_expandable_segments_never_reserve_more_on_these_sequences():
    rng = random.Random(11)
    sizes = [rng.randrange(MIB, 300 * MIB) for _ in range(400)]
    results = []
    for kind in ("default", "expandable-segments"):
        allocator, live = CachingAllocator(kind), []
        for index, size in enumerate(sizes):
            live.append(allocator.malloc(size))
            if index % 3 == 2:
                allocator.free(live.pop(rng.randrange(len(live))))
        results.append(allocator.max_reserved)
    assert results[1] <= results[0]
