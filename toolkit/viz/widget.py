"""The cache-state visualizer: ipywidgets controls over a `CacheStateModel`.

Controls: a step slider, play/pause, step buttons and a request picker. Display: a labelled status block
(`kvtk-status`: "step N of M" and the pool counts per group), the pool figure (its axis fixed at the pool's
capacity, the null block named), the occupancy timeline with a cursor at the step, the selected request's boundary
lanes and the step's events (groups by name). In a static HTML report, where no widget state is saved, the widget's
`text/html` form is a snapshot of the current step: the status, its figures and its tables. Figures go into an `Output` as plotly JSON (plotly's FigureWidget needs anywidget,
which the project does not install; JupyterLab's plotly extension renders the mimetype); everything drawn comes from the model, and the last figures stay on the widget
(`pool_figure`, `lanes_figure`) so tests can read them without a browser.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from toolkit.viz.boundaries import boundary_lanes_figure
from toolkit.viz.pool import occupancy_timeline_figure, pool_occupancy_figure
from toolkit.viz.state_model import CacheStateModel, StepView
from toolkit.viz.style import EVENT_COLORS

STATUS_CLASS = "kvtk-status"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


class CacheStateWidget(widgets.VBox):
    def __init__(self, model: CacheStateModel, *, play_interval_ms: int = 700) -> None:
        self.model = model
        last = model.num_steps - 1
        self.slider = widgets.IntSlider(
            value=model.step,
            min=0,
            max=last,
            step=1,
            description="step",
            continuous_update=False,
            layout=widgets.Layout(width="420px"),
        )
        self.play = widgets.Play(
            value=model.step, min=0, max=last, step=1, interval=play_interval_ms, description="play", show_repeat=False
        )
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.prev_button = widgets.Button(
            description="◀ prev", tooltip="previous step", layout=widgets.Layout(width="80px")
        )
        self.next_button = widgets.Button(
            description="next ▶", tooltip="next step", layout=widgets.Layout(width="80px")
        )
        self.request_picker = widgets.Dropdown(options=model.request_ids, value=model.req_id, description="request")
        self.status = widgets.HTML()
        self.status.add_class(STATUS_CLASS)
        self.events = widgets.HTML()
        self.lru = widgets.HTML()
        self.figures = widgets.Output()
        self.pool_figure = None
        self.lanes_figure = None
        self.timeline_figure = None
        self._timeline_rows = model.timeline_rows()

        self.slider.observe(self._on_step, names="value")
        self.request_picker.observe(self._on_request, names="value")
        self.prev_button.on_click(lambda _: self._set_step(self.model.step - 1))
        self.next_button.on_click(lambda _: self._set_step(self.model.step + 1))

        controls = widgets.HBox([self.play, self.prev_button, self.slider, self.next_button, self.request_picker])
        super().__init__([controls, self.status, self.figures, self.lru, self.events])
        self.refresh()

    @classmethod
    def from_path(cls, path: str | Path, **kwargs) -> "CacheStateWidget":
        return cls(CacheStateModel.from_path(path), **kwargs)

    # ----- events --------------------------------------------------------------------------------------------

    def _set_step(self, step: int) -> None:
        self.slider.value = max(self.slider.min, min(step, self.slider.max))  # the observer redraws

    def _on_step(self, change) -> None:
        self.model.go_to(change["new"])
        self.refresh()

    def _on_request(self, change) -> None:
        if change["new"] is not None:
            self.model.select(change["new"])
            self.refresh()

    # ----- drawing -------------------------------------------------------------------------------------------

    def refresh(self) -> None:
        view = self.model.view()
        lines = self.model.status_lines()
        self.status.value = (
            f'<div class="{STATUS_CLASS}-text" style="font-family:monospace;border:1px solid #ccc;'
            f'padding:4px 8px"><b>{html.escape(lines[0])}</b><br>'
            + "<br>".join(html.escape(ln) for ln in lines[1:])
            + "</div>"
        )
        self.lru.value = _lru_html(view)
        self.events.value = _events_html(view, self.model.group_names)
        self.pool_figure = pool_occupancy_figure(
            self.model.pool_rows(),
            title=f"CPU pool per group, step {view.step}",
            capacity=view.num_cpu_blocks,
            num_reserved=self.model.num_reserved_blocks,
        )
        self.timeline_figure = occupancy_timeline_figure(
            self._timeline_rows,
            cursor=view.step,
            capacity=view.num_cpu_blocks,
            title=f"CPU pool occupancy over steps (cursor: step {view.step})",
        )
        rows = self.model.boundary_rows()
        geometry = self.model.recording.header.get("geometry") or {}
        self.lanes_figure = (
            boundary_lanes_figure(
                rows,
                title=f"Request {self.model.req_id}: boundaries as of step {view.request.as_of_step}",
                scheduler_block_tokens=geometry.get("scheduler_block_tokens"),
                hash_block_tokens=geometry.get("hash_block_tokens"),
            )
            if rows
            else None
        )
        # Replace the Output's outputs trait rather than printing into it: no clear_output/display messages, which
        # papermill's output-widget hook mishandles (a KeyError, or a cell that hangs until the timeout).
        self.figures.outputs = tuple(
            {
                "output_type": "display_data",
                "metadata": {},
                "data": {PLOTLY_MIME: fig.to_plotly_json(), "text/plain": f"<plotly figure: {fig.layout.title.text}>"},
            }
            for fig in self.shown_figures()
        )

    def shown_figures(self) -> list:
        return [fig for fig in (self.pool_figure, self.timeline_figure, self.lanes_figure) if fig is not None]

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle = dict(bundle)
        bundle["text/html"] = self.snapshot_html()
        return bundle

    def show_busiest_step(self) -> None:
        """Move to the step with the most activity (`CacheStateModel.busiest_step`): what a static snapshot of the
        widget should show, rather than step 0 (an empty pool)."""
        self._set_step(self.model.busiest_step())

    def is_at_busiest_step(self) -> bool:
        return self.model.step == self.model.busiest_step()

    def snapshot_html(self) -> str:
        """The current step as static HTML (status, figures, tables): what an HTML report shows for the widget.

        The figures draw once plotly.js is on the page (the report inlines it with its first figure).
        """
        import json
        import uuid

        busiest = " (the busiest step: its events moved the most blocks)" if self.is_at_busiest_step() else ""
        parts = [
            f"<div class='kvtk-snapshot'><p><i>Static snapshot of the visualizer at step {self.model.step}{busiest} "
            "(open the notebook in JupyterLab to step through it)</i></p>",
            self.status.value,
        ]
        for fig in self.shown_figures():
            div = f"kvtk-{uuid.uuid4().hex[:12]}"
            spec = json.dumps(fig.to_plotly_json(), default=str)
            parts.append(
                f"<div id='{div}' style='width:100%'></div><script>(function draw(){{"
                f"if (window.Plotly) {{ var s = {spec}; Plotly.newPlot('{div}', s.data, s.layout); }}"
                f" else {{ setTimeout(draw, 200); }} }})();</script>"
            )
        parts += [self.lru.value, self.events.value, "</div>"]
        return "".join(parts)


def _lru_html(view: StepView) -> str:
    rows = []
    for p in view.pools:
        cells = [" ".join(map(str, ids)) or "-" for ids in (p.lru_block_ids, p.pinned_block_ids, p.in_flight_block_ids)]
        rows.append(f"<tr><td>{html.escape(p.name)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (
        '<table style="font-family:monospace"><tr><th>group</th><th>evictable, next victim first</th>'
        "<th>pinned</th><th>in flight</th></tr>" + "".join(rows) + "</table>"
    )


def _events_html(view: StepView, group_names: list[str]) -> str:
    if not view.events:
        return f"<i>step {view.step}: no events</i>"
    rows = []
    for e in view.events:
        color = EVENT_COLORS.get(e["kind"], "#555")
        gid = e.get("group_id")
        group = "-" if gid is None else (group_names[gid] if 0 <= gid < len(group_names) else f"group {gid}")
        rows.append(
            f'<tr><td style="color:{color}"><b>{e["kind"]}</b></td><td>{html.escape(str(e.get("req_id") or "-"))}</td>'
            f"<td>{html.escape(group)}</td><td>{' '.join(map(str, e.get('block_ids', [])))}</td>"
            f"<td>{html.escape(str(e.get('reason') or ''))}</td></tr>"
        )
    return (
        '<table style="font-family:monospace"><tr><th>event</th><th>request</th><th>group</th><th>blocks</th>'
        "<th>reason</th></tr>" + "".join(rows) + "</table>"
    )
