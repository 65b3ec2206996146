"""Compress/generate LoRA training with accelerate: the joint stage (the paper's recipe) and the compressor
stage (`rhea.training.compressor_stage`, the shipped compressors' recipe).

>>> from rhea.training import TrainConfig
>>> TrainConfig().optim.lr
1e-05
"""
from rhea.training.config import TrainConfig
from rhea.training.data import Sample, SampleSet, SkipRecord, TierMix, build_conversation_samples, build_trajectory_samples, collate
from rhea.training.formats import load_conversations, load_trajectories, record_to_conversation
from rhea.training.losses import AuxiliaryLoss, autoencode_loss
from rhea.training.step import JointStep
from rhea.training.trainer import Trainer, TrainResult, latest_checkpoint

__all__ = [
    "TrainConfig", "Trainer", "TrainResult", "JointStep", "AuxiliaryLoss", "autoencode_loss", "latest_checkpoint",
    "Sample", "SampleSet", "SkipRecord", "TierMix", "build_conversation_samples", "build_trajectory_samples", "collate",
    "load_conversations", "load_trajectories", "record_to_conversation",
]
