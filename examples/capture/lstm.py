"""A word-level language model: an embedding, a two-layer nn.LSTM and a
linear decoder over the vocabulary, the next token's cross-entropy at
every position (the shape of PyTorch's word_language_model example).

    batchfit capture examples/capture/lstm.py:make -- estimate --gpu a100-40gb --batch 64

On a GPU PyTorch runs the whole nn.LSTM as one cuDNN call
(aten::_cudnn_rnn); the capture records the per-timestep ops the meta
device runs instead, and batchfit maps the call to the cuDNN form when it
predicts a GPU.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, EMBED, HIDDEN, LAYERS, SEQ = 1000, 128, 256, 2, 35


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.lstm = nn.LSTM(EMBED, HIDDEN, LAYERS, batch_first=True)
        self.decoder = nn.Linear(HIDDEN, VOCAB)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.decoder(out)


def loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def make(batch_size):
    return {"model": LM(),
            "inputs": torch.zeros(batch_size, SEQ, dtype=torch.long),
            "targets": torch.zeros(batch_size, SEQ, dtype=torch.long),
            "loss": loss}
