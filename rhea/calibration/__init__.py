"""Calibrated heuristic retrieval: retrieval triples, threshold fitting and `rhea calibrate`.

>>> from rhea.calibration import triples, fit_thresholds
>>> len(triples("calibrate", 4))
4
"""
from rhea.calibration.data import SPLITS, CalibrationDataError, Triple, read_triples_jsonl, triples, write_triples_jsonl
from rhea.calibration.fit import (CalibrationError, ThresholdFit, TripleLatents, TripleScores, encode_triples,
                                  fit_thresholds, pair_scores)

__all__ = [
    "SPLITS", "Triple", "triples", "read_triples_jsonl", "write_triples_jsonl", "CalibrationDataError",
    "CalibrationError", "ThresholdFit", "TripleLatents", "TripleScores", "encode_triples", "fit_thresholds", "pair_scores",
]
