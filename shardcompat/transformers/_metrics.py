"""4.x's ``transformers.data.metrics``: the GLUE scores, with scikit-learn and SciPy as in 4.x
(imported when a score is asked for, so the readers work without them)."""

from __future__ import annotations

from typing import Any


def _metrics() -> Any:
    try:
        import scipy.stats
        import sklearn.metrics
    except ImportError as e:
        raise ImportError(f"the GLUE metrics of Transformers 4.x need scikit-learn and SciPy, as they did in 4.x "
                          f"({e}); pip install scikit-learn scipy") from None
    return sklearn.metrics, scipy.stats


def simple_accuracy(preds: Any, labels: Any) -> Any:
    _metrics()
    return (preds == labels).mean()


def acc_and_f1(preds: Any, labels: Any) -> dict[str, Any]:
    metrics, _ = _metrics()
    acc, f1 = simple_accuracy(preds, labels), metrics.f1_score(y_true=labels, y_pred=preds)
    return {"acc": acc, "f1": f1, "acc_and_f1": (acc + f1) / 2}


def pearson_and_spearman(preds: Any, labels: Any) -> dict[str, Any]:
    _, stats = _metrics()
    pearson, spearman = stats.pearsonr(preds, labels)[0], stats.spearmanr(preds, labels)[0]
    return {"pearson": pearson, "spearmanr": spearman, "corr": (pearson + spearman) / 2}


_ACCURACY_KEY = {"sst-2": "acc", "qnli": "acc", "rte": "acc", "wnli": "acc", "hans": "acc", "mnli": "mnli/acc",
                 "mnli-mm": "mnli-mm/acc"}


def glue_compute_metrics(task_name: str, preds: Any, labels: Any) -> dict[str, Any]:
    """The task's GLUE score(s) of numpy predictions against labels: Matthews correlation (CoLA),
    accuracy and F1 (MRPC, QQP), Pearson and Spearman correlation (STS-B), accuracy (the rest)."""
    metrics, _ = _metrics()
    if len(preds) != len(labels):
        raise ValueError(f"Predictions and labels have mismatched lengths {len(preds)} and {len(labels)}")
    if task_name == "cola":
        return {"mcc": metrics.matthews_corrcoef(labels, preds)}
    if task_name in ("mrpc", "qqp"):
        return acc_and_f1(preds, labels)
    if task_name == "sts-b":
        return pearson_and_spearman(preds, labels)
    if task_name in _ACCURACY_KEY:
        return {_ACCURACY_KEY[task_name]: simple_accuracy(preds, labels)}
    raise KeyError(task_name)
