"""What one CEL selector evaluation may cost (pure): kube-scheduler's runtime limit, and a deadline.

Each evaluation is metered (`Meter`) against resource.k8s.io's CELSelectorExpressionMaxCost
(1,000,000), kube-scheduler's runtime limit, counted as cel-go counts: 1 per variable, field or
index read, call and operator, 10 per list and 30 per map literal, constants free, and 1 per step
of a macro (cel-go's size-proportional costs of string and list functions are not modelled). Past
it the evaluation stops with a CelError naming the expression. celpy's tree-walking interpreter
spends far more time per unit than cel-go (kube's 1,000,000 is about 0.1 s there), so a caller that
must answer in time runs the evaluation in a thread under `deadline(seconds, clock)`: the meter stops it
there too, which `asyncio.wait_for` alone cannot (hami.doctor.pod.off_loop).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any

import celpy
from celpy.evaluation import Evaluator

COST_LIMIT = 1_000_000  # resource.k8s.io CELSelectorExpressionMaxCost: one evaluation's runtime cost


class CelError(ValueError):
    """A selector that does not compile, or fails at run time (names the expression's problem)."""


# (the caller's clock, the deadline on it, its seconds) of the evaluations in this context (a thread's, a
# task's): `deadline`. The clock comes from the caller so that this module reads none itself (pure).
_DEADLINE: contextvars.ContextVar[tuple[Callable[[], float], float, float] | None] = contextvars.ContextVar(
    "cel_deadline", default=None)
_CHECK_EVERY = 256  # cost units between two looks at the clock


@contextlib.contextmanager
def deadline(seconds: float, clock: Callable[[], float]) -> Iterator[None]:
    """Selectors evaluated in this context (this thread, this task) within the block stop (CelError)
    once `seconds` have passed on `clock` (e.g. time.monotonic)."""
    token = _DEADLINE.set((clock, clock() + seconds, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class Meter:
    """One evaluation's cost (module docstring), stopped past `limit` or this thread's deadline."""

    __slots__ = ("expression", "cost", "limit", "clock", "at", "seconds", "next_check", "stopped")

    def __init__(self, expression: str, limit: int = COST_LIMIT):
        self.expression = expression
        self.cost = 0
        self.limit = limit
        self.clock, self.at, self.seconds = _DEADLINE.get() or (None, None, 0.0)
        self.next_check = 0
        # why it was stopped: raised again after the evaluation, since CEL's `||` and `&&` may
        # absorb an error from one side
        self.stopped: CelError | None = None

    def charge(self, units: int) -> None:
        self.cost += units
        if self.stopped is not None:
            raise self.stopped
        if self.cost > self.limit:
            self.stopped = CelError(f"{_quote(self.expression)}: cost limit exceeded: costs more than {self.limit} "
                                    f"(resource.k8s.io CELSelectorExpressionMaxCost); write a cheaper selector")
            raise self.stopped
        if self.at is not None and self.cost >= self.next_check:
            self.next_check = self.cost + _CHECK_EVERY
            if self.clock() > self.at:
                self.stopped = CelError(f"{_quote(self.expression)}: not evaluated within {self.seconds:g} s "
                                        f"(cost {self.cost} so far)")
                raise self.stopped


def _quote(expression: str) -> str:
    return f"selector {expression[:120]!r}" + ("..." if len(expression) > 120 else "")


class MeteredEvaluator(Evaluator):
    """celpy's tree-walking evaluator, charging a Meter for the work as cel-go's cost tracker does."""

    meter: Meter

    def sub_evaluator(self, ast: Any) -> Evaluator:
        sub = MeteredEvaluator(ast, activation=self.activation)
        sub.meter = self.meter
        return sub

    def build_macro_eval(self, child: Any) -> Any:
        body, meter = super().build_macro_eval(child), self.meter

        def step(value: Any) -> Any:
            meter.charge(1)
            return body(value)
        return step

    def primary(self, tree: Any) -> Any:
        kind = getattr(tree.children[0], "data", "") if tree.children else ""
        self.meter.charge(_LITERAL_COST.get(kind, 0))
        return super().primary(tree)


_LITERAL_COST = {"ident": 1, "ident_arg": 1, "list_lit": 10, "map_lit": 30}


def _charging(rule: str, operands: int) -> Any:
    """`rule` of the evaluator, charging 1 when the node is an operation (it has `operands` children)."""
    method = getattr(Evaluator, rule)

    def charged(self: MeteredEvaluator, tree: Any) -> Any:
        if len(tree.children) >= operands:
            self.meter.charge(1)
        return method(self, tree)
    charged.__name__ = rule
    return charged


for _rule in ("conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary"):
    setattr(MeteredEvaluator, _rule, _charging(_rule, 2))  # with its operator: one operation
for _rule in ("member_dot", "member_dot_arg", "member_index"):
    setattr(MeteredEvaluator, _rule, _charging(_rule, 1))  # a field, a call, an index: always one


class MeteredRunner(celpy.InterpretedRunner):
    """Evaluates with a fresh Meter for the expression each time."""

    expression = ""
    cost_limit = COST_LIMIT

    def evaluate(self, context: Any) -> Any:
        evaluator = MeteredEvaluator(ast=self.ast, activation=self.new_activation())
        evaluator.meter = meter = Meter(self.expression, self.cost_limit)
        try:
            out = evaluator.evaluate(context)
        except Exception:
            if meter.stopped is not None:
                raise meter.stopped from None
            raise
        if meter.stopped is not None:
            raise meter.stopped
        return out
