"""Typed answers: the figures of the command line's JSON, as dataclasses.

Bytes are integers, as in the JSON. Each object keeps the whole JSON it was
read from in ``raw``, for the figures not lifted into fields.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any


def _gib(n: int | float) -> str:
    return "%.2f GiB" % (n / (1 << 30))


@dataclass(frozen=True)
class Note:
    """A caveat on an answer: what the prediction assumes or cannot model."""

    code: str
    text: str


@dataclass(frozen=True)
class Band:
    """How far this kind of prediction has been from real GPUs: the measured
    device total lay within [predicted × (1 − under), predicted × (1 + over)]
    on ``cases`` recordings."""

    under: float
    over: float
    cases: int
    text: str
    group: str = ""


@dataclass(frozen=True)
class Estimate:
    """One prediction: the memory of a training (or inference) step."""

    model: str
    batch: int
    gpu: str
    precision: str
    optimizer: str
    fits: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    cuda_context_bytes: int
    device_total_bytes: int
    gpu_capacity_bytes: int
    headroom_bytes: int
    # what was live at the peak, by kind (parameters, gradients,
    # optimizer_state, activations, ...)
    breakdown: dict[str, int]
    band: Band | None
    notes: list[Note]
    step_seconds: float | None
    samples_per_second: float | None
    oom_message: str
    raw: dict[str, Any] = field(repr=False)
    svg: str = field(default="", repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any], svg: str = "") -> "Estimate":
        t = d.get("time") or {}
        return cls(
            model=d["model"], batch=d["batch"], gpu=d["gpu"], precision=d["precision"],
            optimizer=d["optimizer"], fits=bool(d["fits"]),
            peak_allocated_bytes=d["peak_allocated_bytes"], peak_reserved_bytes=d["peak_reserved_bytes"],
            cuda_context_bytes=d["cuda_context_bytes"], device_total_bytes=d["device_total_bytes"],
            gpu_capacity_bytes=d["gpu_capacity_bytes"], headroom_bytes=d["headroom_bytes"],
            breakdown=dict(d.get("at_peak_bytes") or {}), band=_band(d.get("band")), notes=_notes(d),
            step_seconds=t.get("step_seconds"), samples_per_second=t.get("samples_per_second"),
            oom_message=d.get("oom_message", ""), raw=d, svg=svg,
        )

    def _repr_html_(self) -> str:
        rows = [
            ("fits", "yes" if self.fits else "no"),
            ("device total (nvidia-smi)", _gib(self.device_total_bytes)),
            ("GPU capacity", _gib(self.gpu_capacity_bytes)),
            ("peak allocated", _gib(self.peak_allocated_bytes)),
            ("peak reserved", _gib(self.peak_reserved_bytes)),
            ("CUDA context", _gib(self.cuda_context_bytes)),
        ]
        rows += [("at the peak: " + k.replace("_", " "), _gib(v)) for k, v in sorted(self.breakdown.items()) if v]
        if self.step_seconds:
            rows.append(("step time", "%.3f s" % self.step_seconds))
        if self.band:
            rows.append(("band", self.band.text))
        body = "".join("<tr><th style='text-align:left'>%s</th><td>%s</td></tr>" % (html.escape(a), html.escape(b)) for a, b in rows)
        head = html.escape("%s · batch %d · %s · %s · %s" % (self.model, self.batch, self.precision, self.optimizer, self.gpu))
        notes = "".join("<li>%s</li>" % html.escape(n.text) for n in self.notes)
        out = "<div><b>%s</b><table>%s</table>" % (head, body)
        if notes:
            out += "<ul>%s</ul>" % notes
        if self.svg:
            out += self.svg
        return out + "</div>"


@dataclass(frozen=True)
class MaxBatch:
    """The largest batch that fits with the margin, and the prediction there."""

    max_batch: int
    margin_bytes: int
    tried: list[int]
    at_max: Estimate | None
    at_next: Estimate | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "MaxBatch":
        return cls(
            max_batch=d.get("max_batch", d.get("max", 0)), margin_bytes=d.get("margin_bytes", 0),
            tried=list(d.get("tried") or []),
            at_max=Estimate.from_json(d["at_max"]) if d.get("at_max") else None,
            at_next=Estimate.from_json(d["at_next"]) if d.get("at_next") else None, raw=d,
        )

    def _repr_html_(self) -> str:
        inner = self.at_max._repr_html_() if self.at_max else ""
        return "<div><b>largest batch that fits: %d</b>%s</div>" % (self.max_batch, inner)


@dataclass(frozen=True)
class Sweep:
    """Predictions over a list or range of batch sizes."""

    rows: list[Estimate]

    def _repr_html_(self) -> str:
        body = "".join(
            "<tr><td>%d</td><td>%s</td><td>%s</td><td>%s</td></tr>"
            % (r.batch, _gib(r.peak_allocated_bytes), _gib(r.device_total_bytes), "yes" if r.fits else "no")
            for r in self.rows
        )
        return "<table><tr><th>batch</th><th>peak allocated</th><th>device total</th><th>fits</th></tr>%s</table>" % body


@dataclass(frozen=True)
class PlanEntry:
    """One way to run the job: its settings, whether it fits, its figures."""

    micro_batch: int
    accumulate: int
    precision: str
    checkpoint: str
    changes: list[str]
    fits: bool
    changes_results: bool
    device_total_bytes: int
    step_seconds: float
    samples_per_second: float
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "PlanEntry":
        return cls(
            micro_batch=d["micro_batch"], accumulate=d["accumulate"], precision=d["precision"],
            checkpoint=d["checkpoint"], changes=list(d.get("changes") or []), fits=bool(d["fits"]),
            changes_results=bool(d.get("changes_results")), device_total_bytes=d["device_total_bytes"],
            step_seconds=d.get("step_seconds", 0.0), samples_per_second=d.get("samples_per_second", 0.0), raw=d,
        )


@dataclass(frozen=True)
class Plan:
    """What to change so that the job fits: the best plans first."""

    current: PlanEntry
    best: list[PlanEntry]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Plan":
        return cls(current=PlanEntry.from_json(d["current"]), best=[PlanEntry.from_json(e) for e in d.get("best") or []], raw=d)

    def _repr_html_(self) -> str:
        body = "".join(
            "<tr><td>%s</td><td>%s</td><td>%s</td></tr>"
            % (html.escape(", ".join(e.changes) or "as it is"), _gib(e.device_total_bytes), "%.3f s" % e.step_seconds)
            for e in self.best
        )
        return "<table><tr><th>plan</th><th>device total</th><th>step</th></tr>%s</table>" % body


def _band(b: dict[str, Any] | None) -> Band | None:
    if not b:
        return None
    return Band(under=b["under"], over=b["over"], cases=b["cases"], text=b.get("text", ""), group=b.get("group", ""))


def _notes(d: dict[str, Any]) -> list[Note]:
    out = []
    for n in d.get("notes") or []:
        if isinstance(n, dict):
            out.append(Note(code=n.get("code", ""), text=n.get("text", "")))
        else:
            out.append(Note(code="", text=str(n)))
    return out
