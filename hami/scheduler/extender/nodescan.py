"""Full-Nodes /filter bodies read only as far as the fit needs (pure, no I/O).

In full-Nodes mode kube-scheduler sends every Node object (about 2 KiB each with 8 GPUs) with
every pod. The fit needs three strings of each: the name, the register annotation and the
device cordon; the answer echoes the chosen Node. `NodeScanner.scan(body)` finds each Node's
bytes in the `items` array with byte searches, and decodes a Node only when its bytes differ from
the ones seen last time under that name (a change of the node: new resourceVersion, handshake,
status); the rest of the body (the pod) is decoded with the array cut out.

Returns `(args, nodes)`: `args` as `extargs.lower_keys` gives it, with `args["nodes"]["items"]`
set to None, and one `ScannedNode` per item in order; or None when the body is not shaped as
expected (then the caller decodes it whole, which also words any error).

Why the answer is the full decode's: the array's text is checked to be `[` + item texts joined
by `,` + `]`, where each item text is one that decoded on its own as a valid Node object (now
or, byte for byte, before). By the JSON grammar such an array has exactly those items. The cut
is replaced by an integer the body does not contain, and the scan is used only when the decoded
rest holds that integer as its top-level `nodes.items`: the cut was exactly that value.
"""

from __future__ import annotations

import orjson

from hami.scheduler.extender.extargs import BadArgs, lower_keys

_START = b'"items":[{'
_NAME = b'"metadata":{"name":"'
# How far into an item its name may start (after kind and apiVersion, when they are sent).
_NAME_WITHIN = 256
_MARK = 7355608001338
_MARK_BYTES = b"7355608001338"
_REGISTER = "hami.io/node-nvidia-register"
_CORDON = "hami.io/device-cordon"


class ScannedNode:
    """One Node as the fit needs it. `known` is the caller's memo (the extender keeps there the
    registration it last found equal to `register`, so an unchanged node costs no string compare)."""

    __slots__ = ("raw", "name", "annotations", "known")

    def __init__(self, raw: bytes, name: str, annotations: dict):
        self.raw = raw  # the Node's JSON text as sent
        self.name = name
        self.annotations = annotations  # only the two the fit reads: register and cordon, when present
        self.known: object = None

    @property
    def register(self) -> str | None:
        return self.annotations.get(_REGISTER)

    @property
    def cordon(self) -> str | None:
        return self.annotations.get(_CORDON)

    def node(self) -> dict:
        """The Node object itself (for the answer)."""
        return orjson.loads(self.raw)


def _decode_node(raw: bytes) -> ScannedNode | None:
    """One Node's text, checked as /filter checks every Node (metadata an object, name a
    string, annotations strings); None when it is not, or is not JSON."""
    try:
        node = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(node, dict):
        return None
    meta = node.get("metadata")
    if not isinstance(meta, dict):
        return None
    name = meta.get("name", "")
    annos = meta.get("annotations")
    if not isinstance(name, str):
        return None
    if annos is None:
        annos = {}
    elif not isinstance(annos, dict) or (annos and set(map(type, annos.values())) != {str}):
        return None
    keep = {k: annos[k] for k in (_REGISTER, _CORDON) if k in annos}
    return ScannedNode(raw, name, keep)


class NodeScanner:
    def __init__(self, limit: int = 20000):
        self._seen: dict[bytes, ScannedNode] = {}  # name as written -> the last text seen under it
        self.limit = limit
        self.decoded = 0  # Nodes decoded (changed or new)
        self.reused = 0  # Nodes taken by their unchanged bytes
        # The last array scanned whole, and its items: most requests repeat it byte for byte.
        self._last: tuple[bytes, list[ScannedNode]] = (b"", [])

    def scan(self, body: bytes, names_at: int = -1) -> tuple[dict, list[ScannedNode]] | None:
        """The body's first array of Node objects, each item decoded or reused by its bytes; None when
        the body holds none the scanner can read. `names_at`: where a list of plain names starts
        (extargs.ArgsDecoder.cached_at), when the body ends with one: no array of objects can start
        at or after it (a `{` there is inside a string), so the first search stops there instead of
        reading the whole list. Kept whole: a byte scanner over one body, whose positions are the
        state every step shares."""
        # The first array of objects whose first item has a metadata name soon (a pod's own
        # `items`, e.g. a configMap volume's, has none).
        start = body.find(_START) if names_at < 0 else body.find(_START, 0, names_at)
        while True:
            if start < 0:
                return None
            arr = start + 8  # the '['
            m = body.find(_NAME, arr + 1, arr + 1 + _NAME_WITHIN)
            # ... in that same first item: no object or array closes before it
            if m >= 0 and body.find(b"}", arr + 1, m) < 0 and body.find(b"]", arr + 1, m) < 0:
                break
            start = body.find(_START, start + 1)
        last, last_items = self._last
        if last and body.startswith(last, arr):
            return self._rest(body, arr, arr + len(last) - 1, last_items, 0)
        pos = arr + 1
        seen = self._seen
        items: list[ScannedNode] = []
        decoded = 0
        # Every item starts as the first does (`{"metadata":{"name":"`, or with kind and
        # apiVersion first); an item ends where `},` and that start follow.
        item = body[pos:m + len(_NAME)]
        after = b"}," + item
        skip = len(item)
        startswith, find = body.startswith, body.find
        # Most Nodes come back in the same place with the same text: try the one seen there
        # last time before looking the name up.
        prev, i, n_prev, size = last_items, 0, len(last_items), len(body)
        while True:
            c = prev[i] if i < n_prev else None
            i += 1
            if c is not None and startswith(c.raw, pos):
                end = pos + len(c.raw)
                items.append(c)
                if end >= size:
                    return None
                sep = body[end]
                if sep == 44:  # ","
                    pos = end + 1
                    continue
                if sep != 93:  # "]"
                    return None
                break
            if not startswith(item, pos):
                return None
            q = find(b'"', pos + skip)
            if q < 0:
                return None
            key = body[pos + skip:q]
            c = seen.get(key)
            if c is not None and startswith(c.raw, pos):
                end = pos + len(c.raw)
            else:
                nxt = body.find(after, pos)
                if nxt >= 0:
                    end = nxt + 1
                else:  # the last item: orjson says where its value ends (in characters)
                    rest = body[pos:]
                    try:
                        orjson.loads(rest)
                        return None
                    except orjson.JSONDecodeError as exc:
                        if not str(exc).startswith("unexpected content after document"):
                            return None
                        end = pos + len(rest.decode("utf-8", "replace")[:exc.pos].encode())
                c = _decode_node(body[pos:end])
                if c is None:
                    return None
                decoded += 1
                if len(seen) >= self.limit:
                    seen.clear()
                seen[key] = c
            items.append(c)
            sep = body[end:end + 1]
            if sep == b",":
                pos = end + 1
                continue
            if sep != b"]":
                return None
            break
        out = self._rest(body, arr, end, items, decoded)
        if out is not None:
            self._last = (body[arr:end + 1], items)
        return out

    def _rest(self, body: bytes, arr: int, end: int, items: list[ScannedNode],
              decoded: int) -> tuple[dict, list[ScannedNode]] | None:
        """Decode the body with the array [arr, end] cut out; None unless it was `nodes.items`."""
        head, tail = body[:arr], body[end + 1:]
        # The mark must be the only one: a number token cannot straddle the cut (it would run
        # into the mark's own digits), so the text outside the array is all there is to check.
        if _MARK_BYTES in head or _MARK_BYTES in tail:
            return None
        try:
            args = lower_keys(orjson.loads(head + _MARK_BYTES + tail))
        except (orjson.JSONDecodeError, BadArgs):
            return None
        nodes = args.get("nodes")
        if not isinstance(nodes, dict):
            return None
        value = nodes.get("items")
        if value.__class__ is not int or value != _MARK:
            return None
        nodes["items"] = None
        self.decoded += decoded
        self.reused += len(items) - decoded
        return args, items
