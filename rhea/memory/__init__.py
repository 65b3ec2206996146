"""Rhea's memories: the instruction recognizer and instructional memory (the verbatim
system block of global rules); episodic memory joins them in `rhea.memory.episodic`.

>>> from rhea.memory import InstructionRecognizer, InstructionalMemory
"""
from rhea.memory.instructional import InstructionalMemory, InstructionEntry, MemoryEvent, infer_slots
from rhea.memory.recognizer import (
    EmbeddingHeadClassifier,
    HashedNgramClassifier,
    InstructionRecognizer,
    PromptClassifier,
    RecognizerDecision,
    RecognizerModelMissingError,
    load_labelled,
)
from rhea.memory.recognizer_eval import precision_recall

__all__ = [
    "InstructionRecognizer", "RecognizerDecision", "EmbeddingHeadClassifier", "HashedNgramClassifier", "PromptClassifier",
    "RecognizerModelMissingError",
    "load_labelled", "precision_recall", "InstructionalMemory", "InstructionEntry", "MemoryEvent", "infer_slots",
]
