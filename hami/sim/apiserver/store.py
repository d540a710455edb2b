"""The object store behind the embedded API server; it outlives any one HTTP server.

- One global, monotonic resourceVersion, bumped on every write (create, update, patch, delete, bind).
- Stored objects are immutable: each `Entry` holds the dict and its serialized JSON bytes, so reads
  (GET, LIST, watch fan-out) never copy or re-encode. Writers build new dicts (copy-on-write).
- A bounded event log (the "watch window") lets watches resume from a resourceVersion; a version
  older than the window answers 410 Gone, as etcd compaction does on a real cluster.
- Each watcher has a bounded line buffer; a watcher that falls behind by more than that is dropped
  (its `on_drop` callback closes the connection), so a client that stops reading cannot grow memory.

All methods are synchronous: in one event loop every write and its fan-out happen atomically.
Errors are `hami.apierror.ApiError(status, reason, message, details)`, the same class the client
raises, rendered by the HTTP layer as a Kubernetes Status (`status_object()`).
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from hami.apierror import ApiError as ApiError  # the one API error shape (hami.apierror)
from hami.sim.apiserver import patch as patchmod
from hami.sim.apiserver import quota as quotamod
from hami.sim.apiserver.resources import (
    BY_KEY,
    STATUS_ONLY_ON_SUBRESOURCE,
    Resource,
    event_field_to_core,
    event_from_view,
    event_to_view,
)
from hami.sim.apiserver.selectors import FieldRequirement, Requirement, matches
from hami.sim.apiserver.validation import Write

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.plural}{"." + res.group if res.group else ""} "{name}" not found',
                    {"name": name, "group": res.group, "kind": res.plural})


def _conflict(res: Resource, name: str, why: str = "the object has been modified; please apply your "
              "changes to the latest version and try again") -> ApiError:
    qual = res.plural + ("." + res.group if res.group else "")
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qual} "{name}": {why}',
                    {"name": name, "group": res.group, "kind": res.plural})


def _binding_conflict(name: str, why: str) -> ApiError:
    """kube-apiserver's BindingREST wraps a refusal that is not a storage error in a Conflict on pods/binding."""
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": {why}',
                    {"name": name, "group": "", "kind": "pods/binding"})


def binding_annotations(value: object) -> dict[str, str]:
    """A Binding's metadata.annotations as kube-apiserver decodes them into map[string]string:
    a JSON null value becomes "" (Go leaves the zero string), anything else but a string is a
    400 naming the field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(400, "BadRequest", f"Binding in version \"v1\" cannot be handled as a Binding: "
                                          f"json: cannot unmarshal {_go_json_type(value)} into Go struct field "
                                          f"ObjectMeta.metadata.annotations of type map[string]string")
    out: dict[str, str] = {}
    for k, v in value.items():
        if v is None:
            v = ""
        elif not isinstance(v, str):
            raise ApiError(400, "BadRequest", f"Binding in version \"v1\" cannot be handled as a Binding: "
                                              f"json: cannot unmarshal {_go_json_type(v)} into Go struct field "
                                              f"ObjectMeta.metadata.annotations of type string")
        out[k] = v
    return out


def _go_json_type(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "value")


def _invalid(res: Resource, name: str, field: str, message: str, reason: str = "FieldValueInvalid") -> ApiError:
    return ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: {field}: {message}',
                    {"name": name, "group": res.group, "kind": res.kind,
                     "causes": [{"reason": reason, "message": message, "field": field}]})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Entry:
    """One stored object version: `obj` (never mutate it) and `raw`, its JSON bytes."""

    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict, raw: bytes):
        self.obj, self.raw = obj, raw

    @property
    def rv(self) -> str:
        return self.obj["metadata"]["resourceVersion"]


class _Event:
    __slots__ = ("rv", "res", "ns", "type", "entry", "old", "_lines")

    def __init__(self, rv: int, res: str, ns: str, type_: str, entry: Entry, old: Entry | None):
        self.rv, self.res, self.ns, self.type, self.entry, self.old = rv, res, ns, type_, entry, old
        self._lines: dict[str, bytes] = {}

    def line(self, type_: str) -> bytes:
        got = self._lines.get(type_)
        if got is None:
            got = self._lines[type_] = event_line(type_, self.entry.raw)
        return got

    def view_line(self, type_: str) -> bytes:
        """The line for watchers of the events.k8s.io/v1 view of a stored core/v1 Event."""
        got = self._lines.get("view:" + type_)
        if got is None:
            got = self._lines["view:" + type_] = event_line(type_, orjson.dumps(event_to_view(self.entry.obj)))
        return got


def event_line(type_: str, raw: bytes) -> bytes:
    return b'{"type":"' + type_.encode() + b'","object":' + raw + b"}\n"


class Watcher:
    """One open watch: a bounded buffer of event lines the HTTP handler drains."""

    def __init__(self, store: Store, res: Resource, ns: str, labels: tuple[Requirement, ...],
                 fields: tuple[FieldRequirement, ...], max_lines: int, max_bytes: int = 64 << 20):
        self.store, self.res, self.ns, self.labels, self.fields = store, res, ns, labels, fields
        self.key = res.storage or res.key  # where its objects are stored
        self.view = bool(res.storage)
        self.max_lines, self.max_bytes = max_lines, max_bytes
        self.buffered_bytes = 0
        self.initial: list[bytes] = []  # ready lines (initial ADDED or replay); not bounded by max_lines
        self.lines: deque[bytes] = deque()
        self.wakeup = asyncio.Event()
        self.dropped = False  # overflowed or cut: the connection is aborted
        self.ended = False  # finished cleanly (server stopping): the stream ends normally
        self.drop_reason = ""
        self.on_drop: Callable[[], None] | None = None
        self.node: str | None = None  # set by Store.watch when indexed by spec.nodeName

    def _filter(self, ev: _Event) -> bytes | None:
        if self.ns and ev.ns != self.ns:
            return None
        line = ev.view_line if self.view else ev.line
        if not self.labels and not self.fields:
            return line(ev.type)
        now_ok = matches(self.labels, self.fields, ev.entry.obj)
        if ev.type != MODIFIED:
            return line(ev.type) if now_ok else None
        was_ok = ev.old is not None and matches(self.labels, self.fields, ev.old.obj)
        if now_ok:
            return line(MODIFIED if was_ok else ADDED)
        return line(DELETED) if was_ok else None

    def push(self, line: bytes) -> None:
        if self.dropped:
            return
        if len(self.lines) >= self.max_lines or self.buffered_bytes + len(line) > self.max_bytes:
            self.drop(f"watch buffer full ({len(self.lines)} events, {self.buffered_bytes} bytes): client too slow")
            return
        self.buffered_bytes += len(line)
        self.lines.append(line)
        self.wakeup.set()

    def drop(self, reason: str) -> None:
        """Stop this watch: free its buffers and ask the HTTP layer to close the connection."""
        if self.dropped:
            return
        self.dropped, self.drop_reason = True, reason
        self.lines.clear()
        self.initial = []
        self.store._unregister(self)
        self.wakeup.set()
        if self.on_drop is not None:
            self.on_drop()

    def end(self) -> None:
        """Finish this watch cleanly: the HTTP layer ends the stream, clients resume from their RV."""
        self.ended = True
        self.store._unregister(self)
        self.wakeup.set()

    def close(self) -> None:
        self.store._unregister(self)

    def take(self) -> list[bytes]:
        """Everything ready now (initial lines first); clears the wakeup flag."""
        out: list[bytes] = []
        if self.initial:
            out, self.initial = self.initial, []
        if self.lines:
            out.extend(self.lines)
            self.lines.clear()
            self.buffered_bytes = 0
        self.wakeup.clear()
        return out


class Store:
    """Objects by resource, namespace and name; a global resourceVersion; watchers."""

    def __init__(self, watch_window: int = 10000, watch_buffer: int = 100_000,
                 watch_buffer_bytes: int = 64 << 20):
        self.rv = 0
        # Per watcher: events (and bytes) queued for a client before it counts as too slow.
        self.watch_buffer, self.watch_buffer_bytes = watch_buffer, watch_buffer_bytes
        self._objs: dict[str, dict[str, dict[str, Entry]]] = {k: {} for k in BY_KEY}
        self._unsorted: set[tuple[str, str]] = set()
        self._events: deque[_Event] = deque(maxlen=max(1, watch_window))
        self._compacted = 0  # watches from an RV below this get 410 Gone
        self._watchers: dict[str, set[Watcher]] = {k: set() for k in BY_KEY}  # not indexed
        # Pods are indexed by spec.nodeName ("" = unbound), as the real watch cache does: a LIST or
        # watch with `spec.nodeName=<node>` (every node agent and monitor) touches only that node's pods.
        self._pods_by_node: dict[str, dict[tuple[str, str], None]] = {}
        self._key_cache: dict[str, dict[str, list[tuple[str, str]]]] = {k: {} for k in BY_KEY}  # for paging
        self._node_watchers: dict[str, set[Watcher]] = {}
        self._cel: Any = None  # hami.kubesched.cel.SelectorCompiler, made on the first DRA write
        self._recounting = False  # a quota's status write must not recount again
        self._pod_totals: dict[str, dict] = {}  # namespace -> its pods by quota key, once a quota needs it
        for ns in SEED_NAMESPACES:
            self.create("namespaces", "", {"metadata": {"name": ns}})

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def resource(key: str) -> Resource:
        try:
            return BY_KEY[key]
        except KeyError:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({key})") from None

    @property
    def watch_window(self) -> int:
        return self._events.maxlen or 1

    def set_watch_window(self, n: int) -> None:
        """Keep only the last `n` events for watch resume (tests shrink it to force 410 Gone)."""
        old = list(self._events)
        self._events = deque(maxlen=max(1, n))
        for ev in old:
            self._append_event(ev)

    def compact(self) -> None:
        """Forget every retained event: any watch resuming from an older RV gets 410 Gone."""
        self._events.clear()
        self._compacted = self.rv

    def _append_event(self, ev: _Event) -> None:
        if len(self._events) == self._events.maxlen:
            self._compacted = self._events[0].rv
        self._events.append(ev)

    def _bucket(self, key: str, ns: str) -> dict[str, Entry]:
        b = self._objs[key].get(ns)
        if b is None:
            b = self._objs[key][ns] = {}
        return b

    def _commit(self, res: Resource, ns: str, name: str, obj: dict, type_: str, old: Entry | None,
                dry_run: bool = False) -> Entry:
        if dry_run:  # `?dryRun=All`: validated and answered, never stored, no version consumed
            obj["metadata"]["resourceVersion"] = old.rv if old is not None else ""
            return Entry(obj, orjson.dumps(obj))
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        entry = Entry(obj, orjson.dumps(obj))
        bucket = self._bucket(res.key, ns)
        if type_ == DELETED:
            bucket.pop(name, None)
            self._key_cache[res.key] = {}
        else:
            if name not in bucket:
                self._unsorted.add((res.key, ns))
                self._key_cache[res.key] = {}
            bucket[name] = entry
        ev = _Event(self.rv, res.key, ns, type_, entry, old)
        self._append_event(ev)
        watchers = self._watchers[res.key]
        if res.key == "pods":
            watchers = self._index_pod(ns, name, type_, obj, old, watchers)
        if watchers:
            for w in list(watchers):
                line = w._filter(ev)
                if line is not None:
                    w.push(line)
        if not self._recounting and (res.key == "resourcequotas" or (res.key == "pods" and (
                type_ != MODIFIED or quotamod.counts_differ(old.obj if old is not None else None, obj)))):
            if res.key == "pods" and ns in self._pod_totals:
                quotamod.add(self._pod_totals[ns], old.obj if old is not None else None, -1)
                quotamod.add(self._pod_totals[ns], obj if type_ != DELETED else None, 1)
            self._recount_quotas(ns)
        return entry

    def _totals(self, ns: str) -> dict:
        """The namespace's pods summed by quota key: counted once, then kept running by _commit."""
        got = self._pod_totals.get(ns)
        if got is None:
            got = self._pod_totals[ns] = quotamod.totals_of(e.obj for e in self._objs["pods"].get(ns, {}).values())
        return got

    def _recount_quotas(self, ns: str) -> None:
        """The quota controller: every ResourceQuota of the namespace gets `status.used` (and `hard`) as
        its pods now count (hami.sim.apiserver.quota), written when it changed."""
        quotas = self._objs["resourcequotas"].get(ns)
        if not quotas:
            return
        totals = self._totals(ns)
        res = self.resource("resourcequotas")
        self._recounting = True
        try:
            for name, entry in list(quotas.items()):
                status = quotamod.status(entry.obj, totals)
                if entry.obj.get("status") != status:
                    new = orjson.loads(entry.raw)
                    new["status"] = status
                    self._commit(res, ns, name, new, MODIFIED, entry)
        finally:
            self._recounting = False

    def admit_pod_quota(self, ns: str, pod: dict) -> None:
        """kube-apiserver's ResourceQuota admission of a pod CREATE (hami.sim.apiserver.quota): raises
        its 403 when the namespace's quotas cannot take the pod."""
        quotas = self._objs["resourcequotas"].get(ns)
        if quotas:
            quotamod.admit(pod, [e.obj for e in quotas.values()], self._totals(ns))

    def _index_pod(self, ns: str, name: str, type_: str, obj: dict, old: Entry | None,
                   watchers: set[Watcher]) -> set[Watcher] | list[Watcher]:
        """Keep the nodeName index; return the watchers this pod event may concern."""
        new_node = (obj.get("spec") or {}).get("nodeName") or ""
        old_node = ((old.obj.get("spec") or {}).get("nodeName") or "") if old is not None else None
        key = (ns, name)
        if old_node is not None and (old_node != new_node or type_ == DELETED):
            bucket = self._pods_by_node.get(old_node)
            if bucket is not None:
                bucket.pop(key, None)
                if not bucket:
                    del self._pods_by_node[old_node]
        if type_ != DELETED:
            self._pods_by_node.setdefault(new_node, {})[key] = None
        if not self._node_watchers:
            return watchers
        out = list(watchers)
        out.extend(self._node_watchers.get(new_node, ()))
        if old_node is not None and old_node != new_node:
            out.extend(self._node_watchers.get(old_node, ()))
        return out

    def _check_ns(self, res: Resource, ns: str) -> str:
        if not res.namespaced:
            return ""
        if not ns:
            raise ApiError(400, "BadRequest", f"a namespace is required for {res.plural}")
        if ns not in self._objs["namespaces"].get("", {}):
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                           {"name": ns, "kind": "namespaces"})
        return ns

    # ------------------------------------------------------------------ reads

    def entry(self, key: str, ns: str, name: str) -> Entry:
        res = self.resource(key)
        if res.storage:
            return _view_entry(self.entry(res.storage, ns, name))
        e = self._objs[key].get(ns if res.namespaced else "", {}).get(name)
        if e is None:
            raise _not_found(res, name)
        return e

    def get(self, key: str, ns: str, name: str) -> dict:
        """A private copy of the stored object."""
        return orjson.loads(self.entry(key, ns, name).raw)

    def iter_entries(self, key: str, ns: str = "") -> Iterable[Entry]:
        """Entries in key order (namespace, name); `ns` "" means all namespaces."""
        res = self.resource(key)
        if res.storage:
            yield from (_view_entry(e) for e in self.iter_entries(res.storage, ns))
            return
        by_ns = self._objs[key]
        if res.namespaced and ns:
            spaces = [ns] if ns in by_ns else []
        else:
            spaces = sorted(by_ns)
        for space in spaces:
            if (key, space) in self._unsorted:
                by_ns[space] = dict(sorted(by_ns[space].items()))
                self._unsorted.discard((key, space))
            yield from by_ns[space].values()

    def list(self, key: str, ns: str = "", labels: tuple[Requirement, ...] = (),
             fields: tuple[FieldRequirement, ...] = ()) -> tuple[int, list[Entry]]:
        """(list resourceVersion, matching entries)."""
        res = self.resource(key)
        if res.storage:
            rv, entries = self.list(res.storage, ns, labels, _core_fields(fields))
            return rv, [_view_entry(e) for e in entries]
        if not labels and not fields:
            return self.rv, list(self.iter_entries(key, ns))
        node = _node_trigger(key, fields)
        if node is not None:
            ns = ns if self.resource(key).namespaced else ""
            keys = sorted(k for k in self._pods_by_node.get(node, ()) if not ns or k[0] == ns)
            by_ns = self._objs[key]
            entries: Iterable[Entry] = (by_ns[k[0]][k[1]] for k in keys)
        else:
            entries = self.iter_entries(key, ns)
        return self.rv, [e for e in entries if matches(labels, fields, e.obj)]

    def list_page(self, key: str, ns: str = "", labels: tuple[Requirement, ...] = (),
                  fields: tuple[FieldRequirement, ...] = (), limit: int = 0,
                  continue_: str = "") -> tuple[int, list[Entry], str]:
        """One page of a LIST: (list resourceVersion, entries, continue token or "").

        Pages after the first read the current objects but report the first page's version, which
        is safe for a reflector (changes in between are replayed by the watch from that version).
        A token older than the watch window answers 410 Expired, as the real server does.
        """
        view = self.resource(key)
        if view.storage:
            rv, entries, token = self.list_page(view.storage, ns, labels, _core_fields(fields), limit, continue_)
            return rv, [_view_entry(e) for e in entries], token
        after: tuple[str, str] | None = None
        rv = self.rv
        if continue_:
            try:
                tok = orjson.loads(base64.urlsafe_b64decode(continue_.encode()))
                rv, after = int(tok["rv"]), (str(tok["k"][0]), str(tok["k"][1]))
            except (ValueError, KeyError, IndexError, TypeError, orjson.JSONDecodeError):
                raise ApiError(400, "BadRequest", f"invalid continue token {continue_[:40]!r}") from None
            if rv < self._compacted:
                raise ApiError(410, "Expired", "The provided continue parameter is too old to display a "
                                               "consistent list result. You can start a new list without the "
                                               "continue parameter.")
        res = self.resource(key)
        ns = ns if res.namespaced else ""
        keys = self._sorted_keys(key, ns, fields)
        i = bisect.bisect_right(keys, after) if after is not None else 0
        by_ns = self._objs[key]
        out: list[Entry] = []
        limit = limit if limit > 0 else len(keys)
        while i < len(keys) and len(out) < limit:
            e = by_ns[keys[i][0]][keys[i][1]]
            i += 1
            if (not labels and not fields) or matches(labels, fields, e.obj):
                out.append(e)
        token = ""
        if i < len(keys):
            token = base64.urlsafe_b64encode(orjson.dumps({"rv": rv, "k": keys[i - 1]})).decode()
        return rv, out, token

    def _sorted_keys(self, key: str, ns: str, fields: tuple[FieldRequirement, ...]) -> list[tuple[str, str]]:
        node = _node_trigger(key, fields)
        if node is not None:
            return sorted(k for k in self._pods_by_node.get(node, ()) if not ns or k[0] == ns)
        cache = self._key_cache[key]
        keys = cache.get(ns)
        if keys is None:
            keys = cache[ns] = [(e.obj["metadata"].get("namespace", ""), e.obj["metadata"]["name"])
                                for e in self.iter_entries(key, ns)]
        return keys

    def count(self, key: str) -> int:
        key = self.resource(key).storage or key
        return sum(len(b) for b in self._objs[key].values())

    # ------------------------------------------------------------------ writes

    def create(self, key: str, ns: str, obj: dict, *, owned: bool = False, dry_run: bool = False) -> Entry:
        """Create `obj` (copied unless `owned`); 409 AlreadyExists, 422 on a bad name or namespace."""
        res = self.resource(key)
        if not owned:
            obj = orjson.loads(orjson.dumps(obj))
        if res.storage:
            return _view_entry(self.create(res.storage, ns, event_from_view(obj), owned=True, dry_run=dry_run))
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        meta = obj["metadata"]
        ns = self._check_ns(res, ns)
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                raise _invalid(res, meta.get("name", ""), "metadata.namespace",
                               f"Invalid value: {meta['namespace']!r}: does not match the namespace of "
                               f"the request ({ns})")
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        name = meta.get("name")
        if not name and meta.get("generateName"):
            name = meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not name:
            raise _invalid(res, "", "metadata.name", "Required value: name or generateName is required")
        self._validate_name(res, name)
        _validate_meta_maps(res, name, meta)
        self.validate_kind(res, name, obj)
        if name in self._objs[key].get(ns, {}):
            qual = res.plural + ("." + res.group if res.group else "")
            raise ApiError(409, "AlreadyExists", f'{qual} "{name}" already exists',
                           {"name": name, "group": res.group, "kind": res.plural})
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        meta["generation"] = 1
        self._defaults(res, obj)
        return self._commit(res, ns, name, obj, ADDED, None, dry_run)

    @staticmethod
    def _validate_name(res: Resource, name: str) -> None:
        if not isinstance(name, str) or len(name) > 253 or not _NAME_RE.fullmatch(name):
            raise _invalid(res, str(name), "metadata.name",
                           f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower "
                           "case alphanumeric characters, '-' or '.', and must start and end with an "
                           "alphanumeric character")

    @staticmethod
    def _defaults(res: Resource, obj: dict) -> None:
        if res.key == "pods":
            spec = obj.setdefault("spec", {})
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            obj["status"] = {"phase": "Pending"}
        elif res.key == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}

    def _prepare_update(self, res: Resource, ns: str, name: str, old: Entry, new: dict,
                        subresource: str) -> dict:
        """Validate `new` against `old` and carry over what the client may not change."""
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
        meta = dict(meta)
        new = dict(new)
        new["metadata"] = meta
        if meta.get("name", name) != name:
            raise _invalid(res, name, "metadata.name",
                           f"Invalid value: {meta.get('name')!r}: the name of the object does not match "
                           f"the name on the URL ({name})")
        if res.namespaced and meta.get("namespace", ns) != ns:
            raise _invalid(res, name, "metadata.namespace",
                           f"Invalid value: {meta.get('namespace')!r}: does not match the namespace of "
                           f"the request ({ns})")
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != old.rv:
            raise _conflict(res, name)
        want_uid = meta.get("uid")
        if want_uid and want_uid != old.obj["metadata"]["uid"]:
            raise _conflict(res, name, f"Precondition failed: UID in precondition: {want_uid}, "
                                       f"UID in object meta: {old.obj['metadata']['uid']}")
        oldmeta = old.obj["metadata"]
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = ns
        for k in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            if k in oldmeta:
                meta[k] = oldmeta[k]
            else:
                meta.pop(k, None)
        new["apiVersion"], new["kind"] = res.api_version, res.kind
        _validate_meta_maps(res, name, meta)
        if subresource == "status":
            if "spec" in old.obj:
                new["spec"] = old.obj["spec"]
            else:
                new.pop("spec", None)
        elif res.key in STATUS_ONLY_ON_SUBRESOURCE:
            if "status" in old.obj:
                new["status"] = old.obj["status"]
            else:
                new.pop("status", None)
        if res.prepare_update is not None:
            res.prepare_update(old.obj, new, subresource)
        if new.get("spec") != old.obj.get("spec"):
            meta["generation"] = oldmeta.get("generation", 1) + 1
        self.validate_kind(res, name, new, subresource, old.obj)
        return new

    def validate_kind(self, res: Resource, name: str, obj: dict, subresource: str = "",
                       old: dict | None = None) -> None:
        """The resource's own validation hook (its row's `validate`); 422 naming the field."""
        if res.validate is None:
            return
        problem = res.validate(Write(res.key, obj, subresource, old, self))
        if problem is not None:
            raise _invalid(res, name, *problem)

    def cel_check(self):
        """The DRA validation's CEL check (hami.sim.apiserver.validation.WriteContext)."""
        if self._cel is None:
            # celpy is loaded only where DRA objects are written
            from hami.kubesched.cel import SelectorCompiler

            self._cel = SelectorCompiler()
        return self._cel.check

    def namespace_labels(self, namespace: str) -> dict:
        """A stored namespace's labels (hami.sim.apiserver.validation.WriteContext)."""
        entry = self._objs["namespaces"].get("", {}).get(namespace)
        return (orjson.loads(entry.raw).get("metadata") or {}).get("labels") or {} if entry else {}

    def update(self, key: str, ns: str, name: str, obj: dict, *, subresource: str = "",
               owned: bool = False, dry_run: bool = False) -> Entry:
        """PUT: replace the object; a stale metadata.resourceVersion gives 409 Conflict."""
        res = self.resource(key)
        if res.storage:
            return _view_entry(self.update(res.storage, ns, name, event_from_view(obj), subresource=subresource,
                                           owned=owned, dry_run=dry_run))
        ns = ns if res.namespaced else ""
        old = self.entry(key, ns, name)
        if not owned:
            obj = orjson.loads(orjson.dumps(obj))
        new = self._prepare_update(res, ns, name, old, obj, subresource)
        if new == old.obj | {"metadata": new["metadata"]} and _same_meta(new["metadata"], old.obj["metadata"]):
            return old  # a no-op write keeps the resourceVersion, as the real server does
        return self._commit(res, ns, name, new, MODIFIED, old, dry_run)

    def patch(self, key: str, ns: str, name: str, body: bytes | str, content_type: str, *,
              subresource: str = "", dry_run: bool = False) -> Entry:
        """PATCH with one of the three patch types; metadata.resourceVersion in it is a precondition."""
        res = self.resource(key)
        ns = ns if res.namespaced else ""
        old = self.entry(key, ns, name)
        try:
            patched = patchmod.apply_patch(old.obj, body, content_type)
        except patchmod.PatchError as exc:
            reason = {400: "BadRequest", 415: "UnsupportedMediaType"}.get(exc.code, "Invalid")
            raise ApiError(exc.code, reason, exc.message) from None
        return self.update(key, ns, name, patched, subresource=subresource, owned=True, dry_run=dry_run)

    def delete(self, key: str, ns: str, name: str, *, uid: str | None = None,
               resource_version: str | None = None, dry_run: bool = False) -> Entry:
        """DELETE at once (no graceful termination); preconditions give 409 on mismatch."""
        res = self.resource(key)
        if res.storage:
            return _view_entry(self.delete(res.storage, ns, name, uid=uid, resource_version=resource_version,
                                           dry_run=dry_run))
        ns = ns if res.namespaced else ""
        old = self.entry(key, ns, name)
        if uid and uid != old.obj["metadata"]["uid"]:
            raise _conflict(res, name, f"Precondition failed: UID in precondition: {uid}, "
                                       f"UID in object meta: {old.obj['metadata']['uid']}")
        if resource_version and resource_version != old.rv:
            raise _conflict(res, name, f"Precondition failed: ResourceVersion in precondition: "
                                       f"{resource_version}, ResourceVersion in object meta: {old.rv}")
        if key == "namespaces" and name in ("default", "kube-system", "kube-public"):
            raise ApiError(403, "Forbidden", f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                           {"name": name, "kind": "namespaces"})
        if key == "namespaces" and not dry_run:
            for other in BY_KEY.values():
                if other.namespaced and not other.storage:
                    for e in list(self._objs[other.key].get(name, {}).values()):
                        self.delete(other.key, name, e.obj["metadata"]["name"])
        final = dict(old.obj)
        final["metadata"] = dict(old.obj["metadata"])
        return self._commit(res, ns, name, final, DELETED, old, dry_run)

    def delete_gracefully(self, ns: str, name: str, grace: int, *, uid: str | None = None,
                          dry_run: bool = False) -> Entry:
        """A pod's graceful DELETE: set deletionTimestamp (now + grace) and deletionGracePeriodSeconds
        and leave the pod for its kubelet to stop (hami.sim.kubelet.termination); a pod on no node, a finished
        one or grace 0 goes at once. A second call may only shorten the grace, as the registry's."""
        old = self.entry("pods", ns, name)
        meta, spec = old.obj["metadata"], old.obj.get("spec") or {}
        if uid and uid != meta["uid"]:
            raise _conflict(self.resource("pods"), name, f"Precondition failed: UID in precondition: {uid}, "
                                                         f"UID in object meta: {meta['uid']}")
        finished = (old.obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if grace <= 0 or not spec.get("nodeName") or finished:
            return self.delete("pods", ns, name, uid=uid, dry_run=dry_run)
        current = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and isinstance(current, int) and current <= grace:
            return old
        obj = dict(old.obj)
        obj["metadata"] = {**meta, "deletionGracePeriodSeconds": grace,
                           "deletionTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + grace))}
        return self._commit(self.resource("pods"), ns, name, obj, MODIFIED, old, dry_run)

    def bind(self, ns: str, name: str, binding: dict, *, dry_run: bool = False) -> Entry:
        """pods/<name>/binding as kube-apiserver's BindingREST (pkg/registry/core/pod/storage):
        target.name required and target.kind "Node" or empty (422); the Binding's UID and
        resourceVersion are preconditions (409); a pod being deleted, already assigned or still
        gated is refused (409 on pods/binding); otherwise spec.nodeName, PodScheduled=True and the
        Binding's metadata.annotations merged into the pod's (each key overwrites, none is removed)
        in one write. The Binding's labels are not copied (kube-apiserver copies only the topology
        labels its PodTopologyLabels admission adds, behind a feature gate)."""
        res = self.resource("pods")
        bmeta = binding.get("metadata") if isinstance(binding.get("metadata"), dict) else {}
        if bmeta.get("name") and bmeta["name"] != name:
            raise ApiError(400, "BadRequest", "name in URL does not match name in Binding object")
        target = binding.get("target") if isinstance(binding.get("target"), dict) else {}
        node, kind = target.get("name"), target.get("kind") or ""
        if not node:
            raise _invalid(res, name, "target.name", "Required value")
        if kind != "Node" and kind:
            raise _invalid(res, name, "target.kind", f'Unsupported value: "{kind}": supported values: "Node", ""')
        annotations = binding_annotations(bmeta.get("annotations"))
        old = self.entry("pods", ns, name)
        meta_old = old.obj["metadata"]
        if bmeta.get("uid") and bmeta["uid"] != meta_old["uid"]:
            raise _conflict(res, name, f"Precondition failed: UID in precondition: {bmeta['uid']}, "
                                       f"UID in object meta: {meta_old['uid']}")
        if bmeta.get("resourceVersion") and bmeta["resourceVersion"] != meta_old.get("resourceVersion"):
            raise _conflict(res, name, f"Precondition failed: ResourceVersion in precondition: "
                                       f"{bmeta['resourceVersion']}, ResourceVersion in object meta: "
                                       f"{meta_old.get('resourceVersion')}")
        if meta_old.get("deletionTimestamp"):
            raise _binding_conflict(name, f"pod {name} is being deleted, cannot be assigned to a host")
        spec = dict(old.obj.get("spec") or {})
        if spec.get("nodeName"):
            raise _binding_conflict(name, f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        if spec.get("schedulingGates"):
            raise _binding_conflict(name, f"pod {name} has non-empty .spec.schedulingGates")
        spec["nodeName"] = node
        new = dict(old.obj)
        new["spec"] = spec
        new["metadata"] = meta = dict(meta_old)
        if annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        status = dict(old.obj.get("status") or {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": _now()})
        status["conditions"] = conds
        new["status"] = status
        return self._commit(res, ns, name, new, MODIFIED, old, dry_run)

    # ------------------------------------------------------------------ watch

    def watch(self, key: str, ns: str = "", labels: tuple[Requirement, ...] = (),
              fields: tuple[FieldRequirement, ...] = (), resource_version: str | None = None,
              max_lines: int | None = None) -> Watcher:
        """Open a watch. No RV (or "0"): ADDED for every current match first. Else replay events
        after that RV from the window; an RV older than the window raises ApiError 410 Gone."""
        res = self.resource(key)
        ns = ns if res.namespaced else ""
        if res.storage:
            fields = _core_fields(fields)
        w = Watcher(self, res, ns, labels, fields, max_lines or self.watch_buffer, self.watch_buffer_bytes)
        key = w.key
        if not resource_version or resource_version == "0":
            w.initial = [event_line(ADDED, (_view_entry(e) if w.view else e).raw)
                         for e in self.list(key, ns, labels, fields)[1]]
        else:
            try:
                since = int(resource_version)
            except ValueError:
                raise ApiError(400, "BadRequest", f"invalid resource version: {resource_version!r}") from None
            if since < self._compacted:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self._compacted})")
            replay = []
            for ev in reversed(self._events):
                if ev.rv <= since:
                    break
                if ev.res == key:
                    line = w._filter(ev)
                    if line is not None:
                        replay.append(line)
            replay.reverse()
            w.initial = replay
        w.node = _node_trigger(key, fields)
        if w.node is not None:
            self._node_watchers.setdefault(w.node, set()).add(w)
        else:
            self._watchers[key].add(w)
        return w

    def _unregister(self, w: Watcher) -> None:
        if w.node is not None:
            ws = self._node_watchers.get(w.node)
            if ws is not None:
                ws.discard(w)
                if not ws:
                    del self._node_watchers[w.node]
        else:
            self._watchers[w.key].discard(w)

    def watchers(self) -> list[Watcher]:
        return [w for ws in (*self._watchers.values(), *self._node_watchers.values()) for w in ws]

    def end_watchers(self) -> int:
        """End every open watch cleanly (what a stopping server does); returns how many."""
        ws = self.watchers()
        for w in ws:
            w.end()
        return len(ws)


def _view_entry(e: Entry) -> Entry:
    obj = event_to_view(e.obj)
    return Entry(obj, orjson.dumps(obj))


def _core_fields(fields: tuple[FieldRequirement, ...]) -> tuple[FieldRequirement, ...]:
    out = []
    for f in fields:
        core = event_field_to_core(f.field)
        out.append(FieldRequirement(core, f.negate, f.value, tuple(core.split("."))))
    return tuple(out)


def _validate_meta_maps(res: Resource, name: str, meta: dict) -> None:
    """metadata.labels and metadata.annotations are maps of strings (else 422, as the real server)."""
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise _invalid(res, name, f"metadata.{field}", f"Invalid value: {str(value)[:100]!r}: must be a map "
                                                           "of string keys to string values")


def _node_trigger(key: str, fields: tuple[FieldRequirement, ...]) -> str | None:
    """The node of a `spec.nodeName=<node>` requirement on pods, else None."""
    if key != "pods":
        return None
    for f in fields:
        if f.field == "spec.nodeName" and not f.negate:
            return f.value
    return None


def _same_meta(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k != "resourceVersion"} == \
        {k: v for k, v in b.items() if k != "resourceVersion"}


def bookmark_line(res: Resource, rv: int, extra_annotations: dict | None = None) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if extra_annotations:
        meta["annotations"] = extra_annotations
    return b'{"type":"BOOKMARK","object":' + orjson.dumps(
        {"kind": res.kind, "apiVersion": res.api_version, "metadata": meta}) + b"}\n"
