# A model called with keywords alone, as Hugging Face models are
# (model(**batch)): the batch shows at the first submodule.
import torch


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, *, input_ids):
        return self.head(self.emb(input_ids))


m = M()
opt = torch.optim.AdamW(m.parameters())
for _ in range(2):
    m(input_ids=torch.randint(0, 10, (7, 3))).sum().backward()
    opt.step()
    opt.zero_grad()
