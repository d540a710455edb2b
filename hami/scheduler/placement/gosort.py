"""Go's sort.Sort (pdqsort, Go >= 1.19), ported so that unstable ties land where Go puts them (pure).

HAMi sorts devices with `sort.Sort`, which is not stable above 12 elements: equal keys end up in
an order only Go's exact algorithm reproduces, and the fit walks that order. Source: Go's
`src/sort/zsortinterface.go`; golden output from Go 1.19 in tests/scheduler/data/go_sort_golden.json.

- `go_sort(data, less)`: sort `data` in place; `less(i, j)` compares the current positions.
"""

from __future__ import annotations

from collections.abc import Callable


def go_sort(data: list, less: Callable[[int, int], bool]) -> None:
    """Port of Go's sort.Sort (pdqsort, Go >= 1.19) over `data` with `less(i, j)` on indices.

    Swaps happen on `data`; `less` must read the current positions of `data`.
    """
    n = len(data)
    if n <= 1:
        return
    limit = n.bit_length()
    _pdqsort(data, less, 0, n, limit)


def _swap(data: list, i: int, j: int) -> None:
    data[i], data[j] = data[j], data[i]


def _insertion_sort(data, less, a, b):
    for i in range(a + 1, b):
        j = i
        while j > a and less(j, j - 1):
            _swap(data, j, j - 1)
            j -= 1


def _sift_down(data, less, lo, hi, first):
    root = lo
    while True:
        child = 2 * root + 1
        if child >= hi:
            return
        if child + 1 < hi and less(first + child, first + child + 1):
            child += 1
        if not less(first + root, first + child):
            return
        _swap(data, first + root, first + child)
        root = child


def _heap_sort(data, less, a, b):
    first = a
    lo = 0
    hi = b - a
    for i in range((hi - 1) // 2, -1, -1):
        _sift_down(data, less, i, hi, first)
    for i in range(hi - 1, -1, -1):
        _swap(data, first, first + i)
        _sift_down(data, less, lo, i, first)


_U64 = (1 << 64) - 1


def _pdqsort(data, less, a, b, limit):
    max_insertion = 12
    was_balanced = True
    was_partitioned = True
    while True:
        length = b - a
        if length <= max_insertion:
            _insertion_sort(data, less, a, b)
            return
        if limit == 0:
            _heap_sort(data, less, a, b)
            return
        if not was_balanced:
            _break_patterns(data, a, b)
            limit -= 1
        pivot, hint = _choose_pivot(data, less, a, b)
        if hint == _DECREASING:
            _reverse_range(data, a, b)
            pivot = (b - 1) - (pivot - a)
            hint = _INCREASING
        if was_balanced and was_partitioned and hint == _INCREASING:
            if _partial_insertion_sort(data, less, a, b):
                return
        if a > 0 and not less(a - 1, pivot):
            mid = _partition_equal(data, less, a, b, pivot)
            a = mid
            continue
        mid, already = _partition(data, less, a, b, pivot)
        was_partitioned = already
        left_len, right_len = mid - a, b - mid
        balance_threshold = length // 8
        if left_len < right_len:
            was_balanced = left_len >= balance_threshold
            _pdqsort(data, less, a, mid, limit)
            a = mid + 1
        else:
            was_balanced = right_len >= balance_threshold
            _pdqsort(data, less, mid + 1, b, limit)
            b = mid


def _partition(data, less, a, b, pivot):
    _swap(data, a, pivot)
    i, j = a + 1, b - 1
    while i <= j and less(i, a):
        i += 1
    while i <= j and not less(j, a):
        j -= 1
    if i > j:
        _swap(data, j, a)
        return j, True
    _swap(data, i, j)
    i += 1
    j -= 1
    while True:
        while i <= j and less(i, a):
            i += 1
        while i <= j and not less(j, a):
            j -= 1
        if i > j:
            break
        _swap(data, i, j)
        i += 1
        j -= 1
    _swap(data, j, a)
    return j, False


def _partition_equal(data, less, a, b, pivot):
    _swap(data, a, pivot)
    i, j = a + 1, b - 1
    while True:
        while i <= j and not less(a, i):
            i += 1
        while i <= j and less(a, j):
            j -= 1
        if i > j:
            break
        _swap(data, i, j)
        i += 1
        j -= 1
    return i


def _partial_insertion_sort(data, less, a, b):
    max_steps = 5
    shortest_shifting = 50
    i = a + 1
    for _ in range(max_steps):
        while i < b and not less(i, i - 1):
            i += 1
        if i == b:
            return True
        if b - a < shortest_shifting:
            return False
        _swap(data, i, i - 1)
        if i - a >= 2:
            j = i - 1
            while j >= 1:
                if not less(j, j - 1):
                    break
                _swap(data, j, j - 1)
                j -= 1
        if b - i >= 2:
            j = i + 1
            while j < b:
                if not less(j, j - 1):
                    break
                _swap(data, j, j - 1)
                j += 1
    return False


def _break_patterns(data, a, b):
    length = b - a
    if length >= 8:
        random = length & _U64
        modulus = 1 << length.bit_length()  # nextPowerOfTwo
        start = a + (length // 4) * 2 - 1
        for idx in range(start, start + 3):
            random ^= (random << 13) & _U64
            random ^= random >> 17
            random ^= (random << 5) & _U64
            other = random & (modulus - 1)
            if other >= length:
                other -= length
            _swap(data, idx, a + other)


_UNKNOWN, _INCREASING, _DECREASING = 0, 1, 2


def _choose_pivot(data, less, a, b):
    shortest_ninther = 50
    max_swaps = 4 * 3
    length = b - a
    swaps = [0]
    i = a + length // 4 * 1
    j = a + length // 4 * 2
    k = a + length // 4 * 3
    if length >= 8:
        if length >= shortest_ninther:
            i = _median_adjacent(data, less, i, swaps)
            j = _median_adjacent(data, less, j, swaps)
            k = _median_adjacent(data, less, k, swaps)
        j = _median(data, less, i, j, k, swaps)
    if swaps[0] == 0:
        return j, _INCREASING
    if swaps[0] == max_swaps:
        return j, _DECREASING
    return j, _UNKNOWN


def _order2(data, less, a, b, swaps):
    if less(b, a):
        swaps[0] += 1
        return b, a
    return a, b


def _median(data, less, a, b, c, swaps):
    a, b = _order2(data, less, a, b, swaps)
    b, c = _order2(data, less, b, c, swaps)
    a, b = _order2(data, less, a, b, swaps)
    return b


def _median_adjacent(data, less, a, swaps):
    return _median(data, less, a - 1, a, a + 1, swaps)


def _reverse_range(data, a, b):
    i, j = a, b - 1
    while i < j:
        _swap(data, i, j)
        i += 1
        j -= 1
