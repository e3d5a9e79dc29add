"""The cache-state visualizer: ipywidgets controls over a `CacheStateModel`.

Controls: a step slider, play/pause, step buttons and a request picker. Display: a labelled status block
(`kvtk-status`: "step N of M" and the pool counts per group), the pool figure, the selected request's boundary
lanes and the step's events. Figures go into an `Output` as plotly JSON (plotly's FigureWidget needs anywidget,
which the project does not install; JupyterLab's plotly extension renders the mimetype); everything drawn comes from the model, and the last figures stay on the widget
(`pool_figure`, `lanes_figure`) so tests can read them without a browser.
"""

from __future__ import annotations

import html
from pathlib import Path

import ipywidgets as widgets

from toolkit.viz.boundaries import boundary_lanes_figure
from toolkit.viz.pool import pool_occupancy_figure
from toolkit.viz.state_model import CacheStateModel, StepView
from toolkit.viz.style import EVENT_COLORS

STATUS_CLASS = "kvtk-status"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


class CacheStateWidget(widgets.VBox):
    def __init__(self, model: CacheStateModel, *, play_interval_ms: int = 700) -> None:
        self.model = model
        last = model.num_steps - 1
        self.slider = widgets.IntSlider(value=model.step, min=0, max=last, step=1, description="step",
                                        continuous_update=False, layout=widgets.Layout(width="420px"))
        self.play = widgets.Play(value=model.step, min=0, max=last, step=1, interval=play_interval_ms,
                                 description="play", show_repeat=False)
        widgets.jslink((self.play, "value"), (self.slider, "value"))
        self.prev_button = widgets.Button(description="◀ prev", tooltip="previous step",
                                          layout=widgets.Layout(width="80px"))
        self.next_button = widgets.Button(description="next ▶", tooltip="next step",
                                          layout=widgets.Layout(width="80px"))
        self.request_picker = widgets.Dropdown(options=model.request_ids, value=model.req_id, description="request")
        self.status = widgets.HTML()
        self.status.add_class(STATUS_CLASS)
        self.events = widgets.HTML()
        self.lru = widgets.HTML()
        self.figures = widgets.Output()
        self.pool_figure = None
        self.lanes_figure = None

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
        self.status.value = (f'<div class="{STATUS_CLASS}-text" style="font-family:monospace;border:1px solid #ccc;'
                             f'padding:4px 8px"><b>{html.escape(lines[0])}</b><br>'
                             + "<br>".join(html.escape(ln) for ln in lines[1:]) + "</div>")
        self.lru.value = _lru_html(view)
        self.events.value = _events_html(view)
        self.pool_figure = pool_occupancy_figure(self.model.pool_rows(), title=f"CPU pool per group, step {view.step}")
        rows = self.model.boundary_rows()
        self.lanes_figure = boundary_lanes_figure(rows, title=f"Request {self.model.req_id}: boundaries as of step "
                                                  f"{view.request.as_of_step}") if rows else None
        # Replace the Output's outputs trait rather than printing into it: no clear_output/display messages, which
        # papermill's output-widget hook mishandles (a KeyError, or a cell that hangs until the timeout).
        self.figures.outputs = tuple(
            {"output_type": "display_data", "metadata": {},
             "data": {PLOTLY_MIME: fig.to_plotly_json(), "text/plain": f"<plotly figure: {fig.layout.title.text}>"}}
            for fig in (self.pool_figure, self.lanes_figure) if fig is not None
        )


def _lru_html(view: StepView) -> str:
    rows = []
    for p in view.pools:
        cells = [" ".join(map(str, ids)) or "-" for ids in (p.lru_block_ids, p.pinned_block_ids, p.in_flight_block_ids)]
        rows.append(f"<tr><td>{html.escape(p.name)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ('<table style="font-family:monospace"><tr><th>group</th><th>evictable, next victim first</th>'
            "<th>pinned</th><th>in flight</th></tr>" + "".join(rows) + "</table>")


def _events_html(view: StepView) -> str:
    if not view.events:
        return f"<i>step {view.step}: no events</i>"
    rows = []
    for e in view.events:
        color = EVENT_COLORS.get(e["kind"], "#555")
        rows.append(f'<tr><td style="color:{color}"><b>{e["kind"]}</b></td><td>{html.escape(str(e.get("req_id") or "-"))}</td>'
                    f'<td>{"-" if e.get("group_id") is None else e["group_id"]}</td><td>{" ".join(map(str, e.get("block_ids", [])))}</td>'
                    f'<td>{html.escape(str(e.get("reason") or ""))}</td></tr>')
    return ('<table style="font-family:monospace"><tr><th>event</th><th>request</th><th>group</th><th>blocks</th>'
            "<th>reason</th></tr>" + "".join(rows) + "</table>")
