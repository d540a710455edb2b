"""A stand-in `libvgpu.so` for the embedded cluster and tests: a well-formed ELF64 shared-object
header around a text payload, so the node agent's install path (ELF and size checks, atomic
replace, version record) runs for real where no HAMi-core build exists. It is never loaded."""

from __future__ import annotations

import struct

_EHDR, _PHDR, _SHDR = 64, 56, 64


def stub_library(payload: bytes = b"hami simulated HAMi-core\n", machine: int = 62) -> bytes:
    """ELF header, one PT_LOAD program header covering the file, the payload, one null section header."""
    shoff = _EHDR + _PHDR + len(payload)
    total = shoff + _SHDR
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, _EHDR, shoff, 0, _EHDR, _PHDR, 1, _SHDR, 1, 0)
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
    return ehdr + phdr + payload + bytes(_SHDR)


def write_stub_library(path: str, version: str = "simulated") -> str:
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(stub_library(f"hami simulated HAMi-core {version}\n".encode()))
    return path
