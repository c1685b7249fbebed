"""PyTorch's CUDA caching allocator, replayed: what it reserves from the driver for a sequence of allocations.

A training step asks the allocator for tensors and gives them back; the allocator asks the driver for segments
and keeps freed blocks cached for reuse. Out-of-memory is raised when a request fits no cached block and the
driver has no room for a new segment even after the cache is released. What decides OOM is therefore the
*reserved* memory (`torch.cuda.memory_reserved()`), not the allocated bytes.

Modelled from ``c10/cuda/CUDACachingAllocator.cpp`` (pytorch/pytorch 001074d2; line numbers at that commit), one
stream, default settings (no ``max_split_size_mb``, so ``release_available_cached_blocks`` returns at once, 2731-2733;
no garbage-collection threshold; no ``roundup_power2_divisions``). Line-checked again on cyyever/pytorch 076f0279, newer
than the latest release 2.14.1: the same at default settings except the one expandable-segments case noted below
(docs/VALIDATION.md, "Allocator versions").

- Sizes round up to a multiple of 512 B (``kMinBlockSize``, 118; ``round_size``, 2026-2037).
- A rounded size of at most 1 MiB (``kSmallSize``, 120) comes from the small pool (2463-2467), whose segments are
  2 MiB (``kSmallBuffer``, 121); a larger one from the large pool, whose segments are 20 MiB (``kLargeBuffer``, 48)
  below 10 MiB (``kMinLargeAlloc``, 123) and the size rounded up to 2 MiB (``kRoundLarge``, 125) from there
  (``get_allocation_size``, 2488-2496).
- A request takes the smallest cached block of its pool that holds it, lowest address among equals
  (``get_free_block``, 2498-2555: ``lower_bound`` over blocks ordered by stream, size, address, 746-754).
- A block is split when what remains is at least 512 B in the small pool (or with expandable segments), and more
  than 1 MiB in the large (``should_split``, 2478-2486); the remainder is cached. A freed block merges with free
  neighbours of its segment alike in mapping (``free_block``, 2331-2408; ``try_merge_blocks``, 2412-2443), so
  blocks of different segments never merge.
- With no cached block, a new segment is asked of the driver (``alloc_block``, 2630-2723); when the driver has no
  room, every cached segment that is wholly free is returned to it (``release_cached_blocks``, 2772-2797;
  ``release_blocks``, 2930-2931) and the request tried once more; then out of memory (``malloc``, 1247-1255, 1351).
- ``expandable_segments:True``: one segment per pool and stream that maps pages (2 MiB in the small pool, 20 MiB in
  the large, 2211) into the lowest unmapped range that, with the free block before it, holds the request, else at
  its end (``try_allocate_expandable_block``, 2178-2232, 2297-2328; ``map``, 414-449), so a request that fits no
  cached block costs only the pages it lacks; releasing the cache unmaps the whole pages inside free blocks
  (``unmap_block``, 2850-2914). Its best fit also weighs a free block with the unmapped range after it
  (2511-2527); here such a block is used only when no cached block holds the request, which yields the same block.
  It counts the free blocks after an unmapped range too (``find_expandable_block``, 2189-2196; 3428-3434 at
  076f0279), and maps the range merged with the free blocks either side (``map_block``, 3514-3515 there): so does
  the model, so after a cache release a hole with free partial pages either side is filled, not passed.
- ``reserved_bytes`` (``torch.cuda.memory_reserved``) grows with each segment or mapped page (2706, 2279) and
  shrinks with each release or unmapping (2828, 2897); its peak is ``max_memory_reserved``.

The recorded H200 runs (PyTorch 2.11) ran with ``expandable_segments:True`` (validation/gpu.py sets it): replaying
the storage log of their two steps, traced on CPU at real size, through this model gives their
``max_memory_reserved()`` within 0.01% (docs/VALIDATION.md, "Reserved memory").
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import Final, Literal

MIN_BLOCK_BYTES: Final = 512  # kMinBlockSize
SMALL_BYTES: Final = 1 << 20  # kSmallSize: the largest request the small pool serves
SMALL_SEGMENT_BYTES: Final = 2 << 20  # kSmallBuffer
MIN_LARGE_ALLOC_BYTES: Final = 10 << 20  # kMinLargeAlloc
LARGE_SEGMENT_BYTES: Final = 20 << 20  # kLargeBuffer
ROUND_LARGE_BYTES: Final = 2 << 20  # kRoundLarge

AllocatorKind = Literal["default", "expandable-segments"]
ALLOCATORS: Final = ("default", "expandable-segments")


class OutOfMemory(Exception):
    """The driver had no room for a segment even after the cache was released."""

    def __init__(self, requested: int, reserved: int) -> None:
        super().__init__(f"out of memory: {requested:,} B requested with {reserved:,} B reserved")
        self.requested, self.reserved = requested, reserved


def round_size(size: int) -> int:
    """The block size a request of `size` bytes takes (``round_size``): a multiple of 512 B, at least 512 B."""
    return MIN_BLOCK_BYTES if size < MIN_BLOCK_BYTES else -(-size // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def segment_size(rounded: int) -> int:
    """The segment asked of the driver for a block of `rounded` bytes that no cached block holds
    (``get_allocation_size``)."""
    if rounded <= SMALL_BYTES:
        return SMALL_SEGMENT_BYTES
    if rounded < MIN_LARGE_ALLOC_BYTES:
        return LARGE_SEGMENT_BYTES
    return -(-rounded // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


@dataclass(eq=False, slots=True)
class Block:
    address: int
    size: int
    segment: _Segment
    allocated: bool = False
    mapped: bool = True
    prev: Block | None = None
    next: Block | None = None


@dataclass(eq=False, slots=True)
class _Segment:
    small: bool
    base: int
    head: Block | None = None
    unmapped: dict[int, Block] = field(default_factory=dict)  # an expandable segment's unmapped ranges, by id


@dataclass
class _Pool:
    small: bool
    # The cached blocks as (size, address, block), in best-fit order; (size, address) is unique, so the block itself
    # is never compared.
    free: list[tuple[int, int, Block]] = field(default_factory=list)
    expandable: _Segment | None = None

    def add(self, block: Block) -> None:
        insort(self.free, (block.size, block.address, block))

    def remove(self, block: Block) -> None:
        free = self.free
        del free[bisect_left(free, (block.size, block.address))]

    def blocks(self) -> list[Block]:
        return [entry[2] for entry in self.free]


class CachingAllocator:
    """One device's caching allocator on one stream. `limit` is what the driver can give it (None: no limit)."""

    def __init__(self, kind: AllocatorKind = "default", *, limit: int | None = None) -> None:
        self.expandable = kind == "expandable-segments"
        self.limit = limit
        self.small, self.large = _Pool(True), _Pool(False)
        self.reserved = self.allocated = self.max_reserved = 0
        self._next_address = 0

    # --- the requests -------------------------------------------------------------------------------------------

    def malloc(self, size: int) -> Block:
        """A tensor of `size` bytes; returns its block, the handle for `free`. Raises OutOfMemory as the allocator
        would."""
        rounded = MIN_BLOCK_BYTES if size < MIN_BLOCK_BYTES else -(-size // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES
        small = rounded <= SMALL_BYTES
        pool = self.small if small else self.large
        free = pool.free
        index = bisect_left(free, (rounded, -1))
        if index < len(free):
            block = free.pop(index)[2]
        else:
            found = self._new_block(pool, rounded)
            if found is None:
                self.release_cache()
                found = self._new_block(pool, rounded)
            if found is None:
                raise OutOfMemory(rounded, self.reserved)
            block = found
        remaining = block.size - rounded
        if remaining >= MIN_BLOCK_BYTES if small or self.expandable else remaining > SMALL_BYTES:
            rest = Block(block.address + rounded, remaining, block.segment, False, True, block, block.next)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = rounded
            insort(free, (remaining, rest.address, rest))
        block.allocated = True
        self.allocated += block.size
        return block

    def free(self, block: Block) -> None:
        if not block.allocated:
            raise ValueError("freed twice")
        block.allocated = False
        self.allocated -= block.size
        free = (self.small if block.segment.small else self.large).free
        before, after = block.prev, block.next  # an allocated block is mapped: it merges with mapped free neighbours
        if before is not None and not before.allocated and before.mapped:
            del free[bisect_left(free, (before.size, before.address))]
            block.address = before.address
            block.size += before.size
            block.prev = before.prev
            if before.prev is not None:
                before.prev.next = block
            else:
                block.segment.head = block
        if after is not None and not after.allocated and after.mapped:
            del free[bisect_left(free, (after.size, after.address))]
            block.size += after.size
            block.next = after.next
            if after.next is not None:
                after.next.prev = block
        insort(free, (block.size, block.address, block))

    def release_cache(self) -> None:
        """``empty_cache``: wholly free segments go back to the driver; in an expandable segment, the whole pages
        inside free blocks are unmapped."""
        for pool in (self.large, self.small):
            for block in pool.blocks():
                if self.expandable:
                    self._unmap(pool, block)
                elif block.prev is None and block.next is None:
                    pool.remove(block)
                    self.reserved -= block.size

    # --- segments -----------------------------------------------------------------------------------------------

    def _new_block(self, pool: _Pool, rounded: int) -> Block | None:
        if self.expandable:
            return self._grow(pool, rounded)
        size = segment_size(rounded)
        if self.limit is not None and self.reserved + size > self.limit:
            return None
        base = self._next_address
        segment = _Segment(pool.small, base)
        self._next_address = base + size
        block = segment.head = Block(base, size, segment)
        self._reserve(size)
        return block

    def _grow(self, pool: _Pool, rounded: int) -> Block | None:
        """Map pages for `rounded` bytes: from the lowest unmapped range (with the free block just before it) whose run
        of free and unmapped blocks holds them; the segment's unmapped end always does (find_expandable_block and
        try_allocate_expandable_block, CUDACachingAllocator.cpp at 076f0279, 3410-3456)."""
        page = SMALL_SEGMENT_BYTES if pool.small else LARGE_SEGMENT_BYTES
        segment = pool.expandable
        if segment is None:
            segment = pool.expandable = _Segment(pool.small, self._next_address)
            self._next_address += 1 << 50  # the virtual range: never exhausted here
            segment.head = Block(segment.base, 1 << 50, segment, mapped=False)
            segment.unmapped[id(segment.head)] = segment.head
        for block in sorted(segment.unmapped.values(), key=lambda b: b.address):
            before = block.prev
            start = before if before is not None and before.mapped and not before.allocated else block
            room, walker = 0, start
            while room < rounded and not walker.allocated:
                room += walker.size
                if walker.next is None:
                    break
                walker = walker.next
            if room >= rounded:  # else a hole too small: the next range
                return self._map_run(pool, start, rounded, page)
        return None

    def _map_run(self, pool: _Pool, candidate: Block, rounded: int, page: int) -> Block | None:
        """Map the unmapped blocks of the run from `candidate` until it holds `rounded` bytes, each merged with the free
        blocks beside it; the block, out of the pool, or None if the driver has no room."""
        if not candidate.mapped:
            mapped = self._map_block(pool, candidate, min(candidate.size, rounded), page)
            if mapped is None:
                return None
            candidate = mapped
        while candidate.size < rounded:
            following = candidate.next  # free, then unmapped: what is free beside a mapped block is merged into it
            assert following is not None and not following.mapped
            mapped = self._map_block(pool, following, min(rounded - candidate.size, following.size), page)
            if mapped is None:
                return None
            candidate = mapped
        pool.remove(candidate)
        return candidate

    def _map_block(self, pool: _Pool, unmapped: Block, size: int, page: int) -> Block | None:
        """map_block: the pages holding the first `size` bytes of `unmapped` mapped, the rest left unmapped, and the
        mapped block merged with the free blocks either side and cached; None if the driver has no room."""
        pages = -(-size // page) * page
        if self.limit is not None and self.reserved + pages > self.limit:
            return None
        self._reserve(pages)
        del unmapped.segment.unmapped[id(unmapped)]
        if pages < unmapped.size:
            rest = Block(unmapped.address + pages, unmapped.size - pages, unmapped.segment, mapped=False)
            self._link_after(unmapped, rest)
            unmapped.segment.unmapped[id(rest)] = rest
            unmapped.size = pages
        unmapped.mapped = True
        for neighbour in (unmapped.prev, unmapped.next):
            if neighbour is not None and neighbour.mapped and not neighbour.allocated:
                pool.remove(neighbour)
                self._merge(unmapped, neighbour)
        pool.add(unmapped)
        return unmapped

    def _unmap(self, pool: _Pool, block: Block) -> None:
        """Unmap the whole pages inside a cached block of an expandable segment; what is left either side stays
        cached, and the unmapped range joins the unmapped ranges beside it."""
        page = SMALL_SEGMENT_BYTES if pool.small else LARGE_SEGMENT_BYTES
        base = block.segment.base
        low = base + -(-(block.address - base) // page) * page
        high = base + (block.address + block.size - base) // page * page
        if high <= low:
            return
        pool.remove(block)
        end = block.address + block.size
        self.reserved -= high - low
        if block.address < low:  # a mapped head stays cached
            head = Block(block.address, low - block.address, block.segment)
            self._link_before(block, head)
            pool.add(head)
        if high < end:  # and so does a mapped tail
            tail = Block(high, end - high, block.segment)
            self._link_after(block, tail)
            pool.add(tail)
        block.address, block.size, block.mapped = low, high - low, False
        block.segment.unmapped[id(block)] = block
        for neighbour in (block.prev, block.next):
            if neighbour is not None and not neighbour.mapped:
                del block.segment.unmapped[id(neighbour)]
                self._merge(block, neighbour)

    def _reserve(self, size: int) -> None:
        self.reserved += size
        if self.reserved > self.max_reserved:
            self.max_reserved = self.reserved

    # --- blocks -------------------------------------------------------------------------------------------------

    @staticmethod
    def _link_after(block: Block, new: Block) -> None:
        new.prev, new.next = block, block.next
        if block.next is not None:
            block.next.prev = new
        block.next = new

    @staticmethod
    def _link_before(block: Block, new: Block) -> None:
        new.prev, new.next = block.prev, block
        if block.prev is not None:
            block.prev.next = new
        else:
            block.segment.head = new
        block.prev = new

    @staticmethod
    def _merge(block: Block, neighbour: Block) -> None:
        """Fold `neighbour` (adjacent, free, alike in mapping) into `block`."""
        if neighbour is block.prev:
            block.address = neighbour.address
            block.prev = neighbour.prev
            if neighbour.prev is not None:
                neighbour.prev.next = block
            else:
                block.segment.head = block
        else:
            block.next = neighbour.next
            if neighbour.next is not None:
                neighbour.next.prev = block
        block.size += neighbour.size
