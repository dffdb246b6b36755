"""A local stand-in for the hub's accuracy metric script (nothing is downloaded in these tests)."""

import datasets
import evaluate


class Accuracy(evaluate.Metric):
    def _info(self):
        features = datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")})
        return evaluate.MetricInfo(description="accuracy", citation="", inputs_description="", features=features)

    def _compute(self, predictions, references):
        return {"accuracy": sum(int(p == r) for p, r in zip(predictions, references)) / len(references)}
