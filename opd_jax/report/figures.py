"""Matplotlib figures of the report in one style: paper size, labelled axes with units, intervals drawn, legends
outside the plotting area (constrained layout; `legend_overlaps` counts data points under a legend).

Object API only (no pyplot, no global backend change); each public plot returns PNG bytes, its *_figure twin the
Figure.
"""
import io

import numpy as np
import pandas as pd

STYLE = {"font.size": 8, "axes.titlesize": 9, "axes.labelsize": 8, "legend.fontsize": 7, "xtick.labelsize": 7,
         "ytick.labelsize": 7, "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
         "grid.alpha": 0.3, "errorbar.capsize": 2}
MARKERS = "os^Dv<>pP*"
ALIGN_LABEL = "mean alignment cos(g*, g_c) (unitless, -1..1)"


def _figure(width: float, height: float):
  from matplotlib import rc_context  # pylint: disable=g-import-not-at-top
  from matplotlib.backends.backend_agg import FigureCanvasAgg  # pylint: disable=g-import-not-at-top
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top
  with rc_context(STYLE):
    fig = Figure(figsize=(width, height), dpi=120, layout="constrained")
    FigureCanvasAgg(fig)
  return fig


def _legend(fig, ax, where: str = "right"):
  """One figure legend of `ax`'s series outside every axes: at the right (upper) or above them (centred)."""
  handles, labels = ax.get_legend_handles_labels()
  if handles:
    if where == "right":
      fig.legend(handles, labels, loc="outside right upper")
    else:
      fig.legend(handles, labels, loc="outside upper center", ncol=min(len(labels), 4))


def legend_overlaps(fig) -> int:
  """Data points (line vertices and errorbar segment ends, in display coordinates) inside any legend's box of the
  drawn figure; 0 when every legend sits clear of the data."""
  fig.canvas.draw()
  renderer = fig.canvas.get_renderer()
  legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
  boxes = [legend.get_window_extent(renderer) for legend in legends]
  points = []
  for ax in fig.axes:
    for line in ax.lines:
      xy = np.asarray(line.get_xydata(), np.float64)
      if line.get_transform() == ax.transData and xy.size:      # data series (axhline: axes coordinates, skipped)
        points.append(ax.transData.transform(xy[np.all(np.isfinite(xy), axis=1)]))
    for collection in ax.collections:
      for segment in getattr(collection, "get_segments", lambda: [])():
        points.append(ax.transData.transform(np.asarray(segment, np.float64)))
  points = np.concatenate([np.reshape(p, (-1, 2)) for p in points] + [np.zeros((0, 2))])
  return int(sum(np.sum((points[:, 0] >= b.x0) & (points[:, 0] <= b.x1) & (points[:, 1] >= b.y0)
                        & (points[:, 1] <= b.y1)) for b in boxes))


def _png(fig) -> bytes:
  from matplotlib import rc_context  # pylint: disable=g-import-not-at-top
  with rc_context(STYLE):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
  return buffer.getvalue()


def _errorbar(ax, x, mean, lo, hi, **kw):
  mean, lo, hi = (np.asarray(v, np.float64) for v in (mean, lo, hi))
  err = np.clip(np.nan_to_num(np.stack([mean - lo, hi - mean])), 0.0, None)   # empty cells: no point, no bar
  ax.errorbar(x, mean, yerr=err, capsize=2, **kw)


def alignment_by_config(summary: pd.DataFrame) -> bytes:
  """alignment_figure as PNG bytes."""
  return _png(alignment_figure(summary))


def alignment_figure(summary: pd.DataFrame):
  """Mean alignment with its interval per configuration (x) and correctness group (marker; legend at the
  right)."""
  from matplotlib import rc_context  # pylint: disable=g-import-not-at-top
  configs = list(pd.unique(summary["config_id"]))
  with rc_context(STYLE):
    fig = _figure(max(4.0, 0.9 * len(configs) + 2.0), 3.0)
    ax = fig.add_subplot(1, 1, 1)
    for offset, (group, marker) in zip((-0.2, 0.0, 0.2), zip(("correct", "incorrect", "all"), "o^s")):
      rows = summary[summary["group"] == group].set_index("config_id").reindex(configs)
      x = np.arange(len(configs)) + offset
      _errorbar(ax, x, rows["mean_alignment"], rows["alignment_ci_lo"], rows["alignment_ci_hi"], fmt=marker,
                label=group)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(configs)))
    ax.set_xticklabels(configs, rotation=20, ha="right")
    ax.set_xlabel("configuration")
    ax.set_ylabel(ALIGN_LABEL)
    level = float(summary["ci_level"].iloc[0])
    ax.set_title(f"alignment by configuration ({100 * level:g}% cluster-bootstrap CI over questions)")
    _legend(fig, ax, "right")
    return fig


SPLIT_LABELS = {"rel_position": "relative position in the response (decile of position / length)",
                "entropy_p": "student entropy quantile (nats, q1 = lowest)",
                "argmax": "sampled token vs the student's argmax", "kind": "token kind (rule-based)"}


def where_split(table: pd.DataFrame, split: str) -> bytes:
  """where_figure as PNG bytes."""
  return _png(where_figure(table, split))


def where_figure(table: pd.DataFrame, split: str):
  """Alignment (top) and teacher advantage (bottom) by bin of one split, incorrect (left) and correct (right)
  rollouts, one series per configuration, with intervals; the legend above the plots."""
  from matplotlib import rc_context  # pylint: disable=g-import-not-at-top
  sub = table[table["split"] == split]
  bins = list(pd.unique(sub["bin"]))
  configs = list(pd.unique(sub["config_id"]))
  width = 0.8 / max(len(configs), 1)
  with rc_context(STYLE):
    fig = _figure(7.0, 5.0)
    axes = fig.subplots(2, 2, sharex=True, sharey="row", squeeze=False)
    for col, group in enumerate(("incorrect", "correct")):
      for row, (metric, lo, hi, label) in enumerate((
          ("mean_alignment", "ci_lo", "ci_hi", "alignment cos(g*, g_c)"),
          ("mean_teacher_advantage", "adv_ci_lo", "adv_ci_hi", "teacher advantage (P_succ)"))):
        ax = axes[row][col]
        for i, config_id in enumerate(configs):
          cells = sub[(sub["group"] == group) & (sub["config_id"] == config_id)].set_index("bin").reindex(bins)
          x = np.arange(len(bins)) - 0.4 + width * (i + 0.5)
          _errorbar(ax, x, cells[metric], cells[lo], cells[hi], fmt=MARKERS[i % len(MARKERS)], ms=3,
                    label=config_id)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xticks(np.arange(len(bins)))
        ax.set_xticklabels(bins, rotation=30, ha="right")
        if col == 0:
          ax.set_ylabel(label)
        if row == 0:
          ax.set_title(f"{group} rollouts")
    fig.supxlabel(SPLIT_LABELS.get(split, split), fontsize=8)
    _legend(fig, axes[0][0], "above")
    return fig


def predictor_auroc(table: pd.DataFrame) -> bytes:
  """predictor_figure as PNG bytes."""
  return _png(predictor_figure(table))


def predictor_figure(table: pd.DataFrame):
  """AUROC for alignment > 0 of every predictor (y) per configuration (marker), with intervals; legend at the
  right."""
  from matplotlib import rc_context  # pylint: disable=g-import-not-at-top
  predictors = list(pd.unique(table["predictor"]))
  configs = list(pd.unique(table["config_id"]))
  with rc_context(STYLE):
    fig = _figure(6.5, max(2.5, 0.28 * len(predictors) + 1.0))
    ax = fig.add_subplot(1, 1, 1)
    step = 0.7 / max(len(configs), 1)
    for i, config_id in enumerate(configs):
      rows = table[table["config_id"] == config_id].set_index("predictor").reindex(predictors)
      y = np.arange(len(predictors)) - 0.35 + step * (i + 0.5)
      mean, lo, hi = (rows[c].to_numpy(np.float64) for c in ("auroc", "auroc_lo", "auroc_hi"))
      err = np.clip(np.nan_to_num(np.stack([mean - lo, hi - mean])), 0, None)
      ax.errorbar(mean, y, xerr=err, fmt=MARKERS[i % len(MARKERS)], ms=3, capsize=2, label=config_id)
    ax.axvline(0.5, color="grey", lw=0.8)
    ax.set_yticks(np.arange(len(predictors)))
    ax.set_yticklabels(predictors)
    ax.set_xlabel("AUROC of the predictor for alignment > 0 (0.5 = no signal)")
    ax.set_ylabel("predictor")
    _legend(fig, ax, "right")
    return fig
