"""A torchvision-shaped fixture that imports like torchvision: loading it loads its HIP
extension (_C.so, linked against torch's library) and registers nms with torch.ops."""

import ctypes
from pathlib import Path

import torch

_C = ctypes.CDLL(str(Path(__file__).resolve().parent / "_C.so"))


def _iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union else 0.0


def _nms(boxes, scores, threshold):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep = []
    for i in order:
        if all(_iou(boxes[i], boxes[k]) <= threshold for k in keep):
            keep.append(i)
    return torch.tensor(keep)


ops = type("ops", (), {"nms": staticmethod(_nms)})
torch.ops.torchvision.nms = _nms
