"""Listener addresses: parse `HOST:PORT` flags and turn a listener into a URL to dial.

Pure (no I/O, no logging). One parser for every `--*-bind-address`, `--http_bind` and `--sim-listen`
flag, so they accept the same forms and their errors name the flag that was wrong.
"""

from __future__ import annotations

import ipaddress

_WILDCARDS = ("", "0.0.0.0", "::")


def split_host_port(address: str, *, flag: str, default_host: str) -> tuple[str, int]:
    """`127.0.0.1:8080` -> ("127.0.0.1", 8080); `:8080` -> (default_host, 8080); `[::1]:80` -> ("::1", 80).

    Raises ValueError naming `flag` and the text when there is no `:`, or the port is not a number
    in 0..65535.
    """
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"{flag} {address!r}: expected HOST:PORT such as 127.0.0.1:8080")
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"{flag} {address!r}: port {port!r} is not a number")
    port_no = int(port)
    if port_no > 65535:
        raise ValueError(f"{flag} {address!r}: port {port_no} is out of range 0..65535")
    return host.strip("[]") or default_host, port_no


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1: a listener only this pod can reach."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a wildcard ("", 0.0.0.0, ::) or a name: reachable from elsewhere


def url_host(host: str) -> str:
    """The host as it goes in a URL: IPv6 literals in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def dial_url(address: str, path: str = "", *, scheme: str = "http") -> str:
    """The URL a local client dials to reach a listener bound on `address` (wildcards -> loopback)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in _WILDCARDS:
        host = "127.0.0.1"
    return f"{scheme}://{url_host(host)}:{port}{path}"
