# Five optimizer steps of two micro-batches of 8 (gradient accumulation),
# with an evaluation forward pass under no_grad after each step that the
# recorder must not count as a micro-batch.
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(5):
    for micro in range(2):
        loss = model(torch.randn(8, 16)).square().mean() / 2
        loss.backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        model(torch.randn(3, 16))
print("trained")
