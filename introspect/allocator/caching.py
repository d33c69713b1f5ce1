"""torch's CUDA caching allocator, one device and its streams, in pure Python.

Written from ``c10/cuda/CUDACachingAllocator.cpp`` (pytorch/pytorch, read at commit
001074d2; the functions named below are ``DeviceCachingAllocator``'s, unchanged in
their logic up to torch 2.13 except where noted) and the 2.13 wheel's
``torch/include/c10/core/AllocatorConfig.h`` for the constants:

* ``round_size``: below 512 B (``kMinBlockSize``) → 512; with ``roundup_power2_divisions``
  > 1 for the size's interval and ``size > 512 * divisions`` →
  ``roundup_power2_next_division``; else up to a multiple of 512.
* ``get_pool``: ≤ 1 MiB (``kSmallSize``) → the small pool, else the large one.
* ``get_allocation_size``: ≤ 1 MiB → a 2 MiB segment (``kSmallBuffer``); < 10 MiB
  (``kMinLargeAlloc``) → ``large_segment_size`` (20 MiB, ``kLargeBuffer``); else the size
  rounded up to 2 MiB (``kRoundLarge``).
* ``get_free_block``: best fit — the smallest free block of the pool with ``size`` ≥ the
  request (``BlockComparatorSize``: size, then address); an oversize block (≥
  ``max_split_size``) never serves a smaller request, and serves a larger one only if it
  is less than ``max_non_split_rounding_size`` (20 MiB) bigger. Expandable blocks count
  as the size they can grow to (free block + the unmapped block after it).
* ``malloc``: free block, else (``garbage_collect_cached_blocks`` when a memory fraction
  and ``garbage_collection_threshold`` are set) ``alloc_block``, else
  ``release_available_cached_blocks`` (oversize cached blocks, only with
  ``max_split_size`` set) and retry, else ``release_cached_blocks`` (every unsplit cached
  segment; expandable ones unmap their free pages) and retry, else out of memory.
* ``should_split``: small pool or expandable segments: a remainder ≥ 512 B; large pool:
  the request < ``max_split_size`` and a remainder > 1 MiB.
* ``free_block`` / ``try_merge_blocks``: a freed block merges with free neighbours of its
  segment (both mapped, or both unmapped).
* Expandable segments (``ExpandableSegment``, ``find_expandable_block``, ``map_block``,
  ``try_allocate_expandable_block``, ``unmap_block``): one segment per pool reserves
  9/8 of the device's memory as address space and maps physical pages of 2 MiB (small
  pool) or ``large_segment_size`` (large pool) at its lowest free address as requests
  need them; ``empty_cache`` unmaps the pages of free blocks that lie wholly inside them.
* ``setMemoryFraction``: ``allowed_memory_maximum``; ``alloc_block`` refuses a segment that
  would take reserved memory past it (the expandable path checks the request's
  ``alloc_size`` there too).

* Streams: every block belongs to the stream it was allocated on (``Block::stream``);
  ``BlockPool`` orders its free blocks by (stream, size, address)
  (``BlockComparatorSize``), so ``get_free_block`` finds only the requesting stream's
  blocks, ``release_available_cached_blocks`` frees only its oversize ones, and an
  expandable segment serves one stream (``find_expandable_block`` compares
  ``segment->stream()``). A block freed on one stream is never reused by another:
  each stream keeps its own cached blocks, so a side stream's (an all-gather's) cache
  adds to the reserve. ``malloc(size, stream)``; stream 0 is the default stream.

The device's own limit is ``capacity``: a ``cudaMalloc`` (or an expandable page's
``cuMemCreate``) fails when reserved memory would pass it. Not modelled:
``recordStream``'s events (a block used on another stream is free once the stream
reaches it: the replay frees it when its free event comes), CUDA graphs' private pools,
IPC, the free-memory callbacks.
"""

from __future__ import annotations

import bisect

from introspect.allocator.config import UNLIMITED, AllocatorConfig

MiB = 2**20
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_ROUND_LARGE = 2 * MiB


class OutOfMemory(Exception):
    """``torch.OutOfMemoryError``: ``size`` bytes (the segment ``alloc_size``) did not fit."""

    def __init__(self, size: int, alloc_size: int, allocated: int, reserved: int) -> None:
        super().__init__(
            f"CUDA out of memory. Tried to allocate {alloc_size} bytes; {allocated} allocated, "
            f"{reserved - allocated} reserved but unallocated"
        )
        self.size, self.alloc_size = size, alloc_size
        self.allocated, self.reserved = allocated, reserved


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """``roundup_power2_next_division``: up to the next of ``divisions`` equal steps
    between the powers of two around ``size``."""
    if size <= 4 or divisions <= 1 or size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor >> (divisions.bit_length() - 1)
    if step == 0:
        return floor << 1
    low = size & ~(step - 1)
    return size if low == size else low + step


def round_size(size: int, cfg: AllocatorConfig) -> int:
    """``round_size``: the block a request of ``size`` bytes takes."""
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    divisions = cfg.divisions(size)
    if divisions > 1 and size > K_MIN_BLOCK * divisions:
        return roundup_power2_next_division(size, divisions)
    return -(-size // K_MIN_BLOCK) * K_MIN_BLOCK


def allocation_size(size: int, cfg: AllocatorConfig) -> int:
    """``get_allocation_size``: the segment ``cudaMalloc`` gets for a rounded request."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return cfg.large_segment_size
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


class Block:
    """One block: a range of a segment, allocated or free, mapped or not."""

    __slots__ = (
        "addr", "size", "pool", "segment", "prev", "next", "allocated", "mapped", "stream"
    )  # fmt: skip

    def __init__(
        self, addr: int, size: int, pool: Pool, segment: Segment | None, stream: int = 0
    ) -> None:
        self.addr, self.size, self.pool, self.segment = addr, size, pool, segment
        self.stream = stream
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False
        self.mapped = True

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: Block | None, after: Block | None) -> None:
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after


class Segment:
    """An expandable segment's address space (``ExpandableSegment``): which pages are
    mapped is read from its blocks (``Block.mapped``), never a list of pages."""

    __slots__ = ("base", "page", "pages")

    def __init__(self, base: int, page: int, pages: int) -> None:
        self.base, self.page, self.pages = base, page, pages

    @property
    def size(self) -> int:
        return self.page * self.pages


class Pool:
    """``BlockPool``: free mapped blocks by (stream, size, address); unmapped ones by
    address."""

    __slots__ = ("small", "keys", "blocks", "unmapped", "gc_calls", "ages")

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: list[tuple[int, int, int]] = []
        self.blocks: dict[tuple[int, int, int], Block] = {}
        self.unmapped: dict[int, Block] = {}
        self.gc_calls = 0
        #: id(block) -> gc_calls when it was inserted (``gc_count_base``); kept only while
        #: garbage collection can run (a fraction and a threshold set).
        self.ages: dict[int, int] | None = None

    def insert(self, b: Block) -> None:
        key = (b.stream, b.size, b.addr)
        bisect.insort(self.keys, key)
        self.blocks[key] = b
        if self.ages is not None:
            self.ages[id(b)] = self.gc_calls

    def remove(self, b: Block) -> None:
        key = (b.stream, b.size, b.addr)
        del self.blocks[key]
        del self.keys[bisect.bisect_left(self.keys, key)]
        if self.ages is not None:
            self.ages.pop(id(b), None)

    def lower_bound(self, size: int, stream: int = 0) -> int:
        return bisect.bisect_left(self.keys, (stream, size, -1))

    def unmapped_by_address(self, stream: int = 0) -> list[Block]:
        return [b for a, b in sorted(self.unmapped.items()) if b.stream == stream]


class CachingAllocator:
    """One device's ``DeviceCachingAllocator``; sizes in bytes, blocks are handles."""

    def __init__(self, cfg: AllocatorConfig, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.small, self.large = Pool(True), Pool(False)
        self.allocated = self.reserved = self.requested = 0
        self.peak_allocated = self.peak_reserved = 0
        self.segments = 0
        self.num_alloc_retries = self.num_ooms = 0
        self._next_addr = 1 << 40
        self._expandable: dict[bool, list[Segment]] = {True: [], False: []}
        self.allowed = None
        if capacity is not None and cfg.per_process_memory_fraction < 1.0:
            self.allowed = int(cfg.per_process_memory_fraction * capacity)
        self.cfg = cfg  # settable between calls, as torch.cuda.memory._set_allocator_settings

    @property
    def cfg(self) -> AllocatorConfig:
        return self._cfg

    @cfg.setter
    def cfg(self, cfg: AllocatorConfig) -> None:
        self._cfg = cfg
        self._plain_rounding = not any(d > 1 for d in cfg.roundup_power2_divisions)
        self._track_ages()

    # -- the public calls ---------------------------------------------------------------

    def set_memory_fraction(self, fraction: float) -> None:
        """``setMemoryFraction``: reserved memory may not pass ``fraction`` of capacity."""
        if self.capacity is None:
            raise ValueError("a memory fraction needs a capacity")
        self.allowed = int(fraction * self.capacity)
        self._track_ages()

    def _track_ages(self) -> None:
        """Free blocks' ages are kept once garbage collection can run (torch counts them
        only then: ``get_free_block``'s ``get_free_blocks_call_count``)."""
        if self.allowed is None or self._cfg.garbage_collection_threshold <= 0:
            return
        for pool in (self.small, self.large):
            if pool.ages is None:
                pool.ages = {id(b): pool.gc_calls for b in pool.blocks.values()}

    def malloc(self, orig_size: int, stream: int = 0) -> Block:
        """``malloc``: the block for a request on ``stream``, or :class:`OutOfMemory`."""
        if orig_size >= K_MIN_BLOCK and self._plain_rounding:
            size = -(-orig_size // K_MIN_BLOCK) * K_MIN_BLOCK  # round_size, no divisions
        else:
            size = round_size(orig_size, self._cfg)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        alloc_size = allocation_size(size, self._cfg)
        block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.allowed is not None and self._cfg.garbage_collection_threshold > 0:
                self._garbage_collect()
            block = self._alloc_block(pool, size, alloc_size, False, stream)
            if block is None and self._release_available_cached_blocks(pool, size, stream):
                block = self._alloc_block(pool, size, alloc_size, False, stream)
            if block is None:
                self.release_cached_blocks()
                block = self._alloc_block(pool, size, alloc_size, True, stream)
        if block is None:
            self.num_ooms += 1
            raise OutOfMemory(orig_size, alloc_size, self.allocated, self.reserved)
        return self._alloc_found_block(block, size, orig_size)

    def free(self, block: Block) -> None:
        """``free`` → ``free_block``: back to its pool, merged with free neighbours."""
        block.allocated = False
        self.allocated -= block.size
        pool = block.pool
        for other in (block.prev, block.next):
            self._try_merge(block, other, pool)
        pool.insert(block)

    def empty_cache(self) -> None:
        """``emptyCache`` → ``release_cached_blocks``."""
        self.release_cached_blocks()

    # -- finding and making blocks ------------------------------------------------------

    def _get_free_block(self, pool: Pool, size: int, stream: int = 0) -> Block | None:
        cfg = self._cfg
        if self.allowed is not None and cfg.garbage_collection_threshold > 0:
            pool.gc_calls += 1
        i = pool.lower_bound(size, stream)
        if i == len(pool.keys) or pool.keys[i][0] != stream:
            return None
        b = pool.blocks[pool.keys[i]]
        if b.segment is not None:
            if cfg.expandable_segments:

                def grows_to(x: Block) -> int:
                    nxt = x.next
                    return x.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

                while b.segment is not None and i + 1 < len(pool.keys):
                    nxt = pool.blocks[pool.keys[i + 1]]
                    if nxt.stream != stream or grows_to(nxt) >= grows_to(b):
                        break
                    i, b = i + 1, nxt
            else:
                while b.segment is not None:
                    i += 1
                    if i == len(pool.keys) or pool.keys[i][0] != stream:
                        return None
                    b = pool.blocks[pool.keys[i]]
        if size < cfg.max_split_size and b.size >= cfg.max_split_size:
            return None
        if size >= cfg.max_split_size and b.size >= size + cfg.max_non_split_rounding_size:
            return None
        pool.remove(b)
        return b

    def _fits(self, extra: int) -> bool:
        return self.capacity is None or self.reserved + extra <= self.capacity

    def _alloc_block(
        self, pool: Pool, size: int, alloc_size: int, retry: bool, stream: int = 0
    ) -> Block | None:
        if retry:
            self.num_alloc_retries += 1
        if self.allowed is not None and self.reserved + alloc_size > self.allowed:
            return None
        if self._cfg.expandable_segments:
            return self._try_allocate_expandable(pool, size, stream)
        if not self._fits(alloc_size):
            return None
        block = Block(self._take_address(alloc_size), alloc_size, pool, None, stream)
        self.reserved += alloc_size
        self.segments += 1
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return block

    def _take_address(self, size: int) -> int:
        addr = self._next_addr
        self._next_addr += -(-size // K_ROUND_LARGE) * K_ROUND_LARGE + K_ROUND_LARGE
        return addr

    def _alloc_found_block(self, block: Block, size: int, orig_size: int) -> Block:
        remaining = block.size - size
        if self._cfg.expandable_segments or block.pool.small:
            split = remaining >= K_MIN_BLOCK
        else:
            split = size < self._cfg.max_split_size and remaining > K_SMALL_SIZE
        if split:
            used = Block(block.addr, size, block.pool, block.segment, block.stream)
            used.splice(block.prev, block)
            block.addr += size
            block.size = remaining
            block.pool.insert(block)
            block = used
        block.allocated = True
        self.allocated += block.size
        self.requested += orig_size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return block

    def _try_merge(self, dst: Block, src: Block | None, pool: Pool) -> int:
        """``try_merge_blocks``: ``dst`` takes in a free neighbour ``src``."""
        if src is None or src.allocated or dst.mapped != src.mapped:
            return 0
        if src.mapped:
            pool.remove(src)
        else:
            del pool.unmapped[src.addr]
        if dst.prev is src:
            dst.addr = src.addr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    # -- expandable segments ------------------------------------------------------------

    def _find_expandable(self, pool: Pool, size: int, stream: int = 0) -> Block:
        def allocatable(b: Block | None) -> bool:
            return b is not None and not b.allocated

        def room(b: Block | None) -> bool:
            total = 0
            while total < size and allocatable(b):
                total += b.size
                b = b.next
            return total >= size

        for c in pool.unmapped_by_address(stream):
            if allocatable(c.prev):
                c = c.prev
            if room(c):
                return c
        page = K_SMALL_BUFFER if pool.small else self._cfg.large_segment_size
        # 9/8 of the device's memory (find_expandable_block); with no device, room for
        # the request (a capacity-free replay never runs out of address space)
        space = self.capacity if self.capacity is not None else max(2**46, size)
        space += space // 8
        seg = Segment(self._take_address(space), page, -(-space // page))
        self._expandable[pool.small].append(seg)
        b = Block(seg.base, seg.size, pool, seg, stream)
        b.mapped = False
        pool.unmapped[b.addr] = b
        return b

    def _map(self, to_map: Block, size: int) -> bool:
        """``map_block`` with ``ExpandableSegment::map``: the pages under
        [addr, addr + size), all or none."""
        seg = to_map.segment
        begin = (to_map.addr - seg.base) // seg.page
        end = -(-(to_map.addr + size - seg.base) // seg.page)
        mapped = (end - begin) * seg.page
        if not self._fits(mapped):
            return False
        pool = to_map.pool
        del pool.unmapped[to_map.addr]
        to_map.mapped = True
        if mapped < to_map.size:
            rest = Block(to_map.addr + mapped, to_map.size - mapped, pool, seg, to_map.stream)
            rest.mapped = False
            rest.splice(to_map, to_map.next)
            pool.unmapped[rest.addr] = rest
            to_map.size = mapped
        self._try_merge(to_map, to_map.prev, pool)
        self._try_merge(to_map, to_map.next, pool)
        pool.insert(to_map)
        self.reserved += mapped
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return True

    def _try_allocate_expandable(self, pool: Pool, size: int, stream: int = 0) -> Block | None:
        c = self._find_expandable(pool, size, stream)
        if not c.mapped and not self._map(c, min(c.size, size)):
            return None
        while c.size < size:
            nxt = c.next
            if nxt is None or not self._map(nxt, min(size - c.size, nxt.size)):
                return None
            c = nxt
        pool.remove(c)
        return c

    def _unmap(self, block: Block) -> None:
        """``unmap_block``: the pages wholly inside a free expandable block go back."""
        seg, pool = block.segment, block.pool
        begin = -(-(block.addr - seg.base) // seg.page)
        end = (block.addr + block.size - seg.base) // seg.page
        if begin >= end:
            return
        pool.remove(block)
        start, stop = seg.base + begin * seg.page, seg.base + end * seg.page
        if start > block.addr:
            before = Block(block.addr, start - block.addr, pool, seg, block.stream)
            before.splice(block.prev, block)
            pool.insert(before)
        if stop < block.addr + block.size:
            after = Block(stop, block.addr + block.size - stop, pool, seg, block.stream)
            after.splice(block, block.next)
            pool.insert(after)
        block.addr, block.size, block.mapped = start, stop - start, False
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.unmapped[block.addr] = block
        self.reserved -= stop - start

    # -- giving memory back -------------------------------------------------------------

    def _release_block(self, block: Block) -> None:
        """``release_block``: ``cudaFree`` of a whole cached segment."""
        block.pool.remove(block)
        self.reserved -= block.size
        self.segments -= 1

    def _release_available_cached_blocks(self, pool: Pool, size: int, stream: int = 0) -> bool:
        """Free ``stream``'s oversize cached blocks, the largest first, until ``size`` is
        covered."""
        cut = self._cfg.max_split_size
        if cut == UNLIMITED:
            return False
        key = max(size, cut)
        i = pool.lower_bound(key, stream)
        # pytorch/pytorch#134338: an expandable block found is never released; the
        # search falls back to the oversize blocks below it. (A free oversize block is a
        # whole segment: oversize requests are never split, smaller ones get segments
        # rounded to 2 MiB.)
        found = i < len(pool.keys) and pool.keys[i][0] == stream
        if found and pool.blocks[pool.keys[i]].segment is None:
            self._release_block(pool.blocks[pool.keys[i]])
            return True
        released = 0
        for k in reversed(pool.keys[:i]):
            if released >= key or k[0] != stream or k[1] < cut:
                break
            b = pool.blocks[k]
            if b.segment is None:
                released += b.size
                self._release_block(b)
        return released >= key

    def release_cached_blocks(self) -> None:
        """``release_cached_blocks`` → ``release_blocks`` of each pool: every unsplit
        cached segment is freed; expandable blocks unmap their whole free pages."""
        for pool in (self.large, self.small):
            to_unmap = []
            for key in list(pool.keys):
                b = pool.blocks[key]
                if b.segment is not None:
                    to_unmap.append(b)
                elif not b.is_split():
                    self._release_block(b)
            for b in to_unmap:
                self._unmap(b)
                if not b.mapped and not b.is_split():
                    del pool.unmapped[b.addr]
                    self._expandable[pool.small].remove(b.segment)

    def _garbage_collect(self) -> None:
        """``garbage_collect_cached_blocks``: above ``threshold × allowed``, free unsplit
        cached large segments at least as old (in free-block searches) as their mean."""
        pool = self.large
        threshold = int(self._cfg.garbage_collection_threshold * self.allowed)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        candidates = [
            pool.blocks[k]
            for k in pool.keys
            if pool.blocks[k].segment is None and not pool.blocks[k].is_split()
        ]
        if not candidates:
            return
        age = {id(b): pool.gc_calls - pool.ages.get(id(b), pool.gc_calls) for b in candidates}
        total, count, reclaimed, freed = sum(age.values()), len(candidates), 0, True
        while reclaimed < target and freed and count > 0:
            mean = total / count
            freed = False
            for b in list(candidates):
                if age[id(b)] >= mean:
                    freed = True
                    reclaimed += b.size
                    total -= age[id(b)]
                    count -= 1
                    candidates.remove(b)
                    self._release_block(b)
