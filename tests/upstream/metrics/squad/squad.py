"""A local stand-in for the hub's squad metric script (nothing is downloaded in these tests): exact
match and token F1, in percent, as the 4.x question-answering examples read them."""
import collections

import datasets
import evaluate


def _tokens(text):
    return text.lower().split()


def _f1(prediction, truth):
    common = collections.Counter(_tokens(prediction)) & collections.Counter(_tokens(truth))
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(_tokens(prediction)), same / len(_tokens(truth))
    return 2 * precision * recall / (precision + recall)


class Squad(evaluate.Metric):
    def _info(self):
        features = datasets.Features({
            "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
            "references": {"id": datasets.Value("string"),
                           "answers": datasets.features.Sequence({"text": datasets.Value("string"),
                                                                  "answer_start": datasets.Value("int32")})},
        })
        return evaluate.MetricInfo(description="squad", citation="", inputs_description="", features=features)

    def _compute(self, predictions, references):
        truth = {r["id"]: r["answers"]["text"] for r in references}
        exact = f1 = 0.0
        for p in predictions:
            answers = truth[p["id"]]
            exact += max(float(p["prediction_text"].strip().lower() == a.strip().lower()) for a in answers)
            f1 += max(_f1(p["prediction_text"], a) for a in answers)
        return {"exact_match": 100 * exact / len(predictions), "f1": 100 * f1 / len(predictions)}
