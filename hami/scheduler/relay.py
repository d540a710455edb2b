"""A call made before who answers it exists (pure, no I/O).

Some of the scheduler's parts call each other both ways: the cache tells the requeue waker that
capacity grew while the waker reads the cache's index; the Placer tells the waker and the GPU
preemption controller that a pod fits nowhere while the controller reads the Placer's held
decisions. A `Relay` breaks such a circle in the open: it is made first and given to the caller's
constructor; each listener connects itself (or is connected by role.py) once it exists. Nothing
is wired by setting another object's attributes, and a call with no listener yet does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Relay:
    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[Callable[..., Any]] = []

    def connect(self, listener: Callable[..., Any]) -> None:
        self._listeners.append(listener)

    def __call__(self, *args: Any) -> None:
        for listener in self._listeners:
            listener(*args)

    def __bool__(self) -> bool:
        return bool(self._listeners)
