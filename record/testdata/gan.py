# Two optimizers stepping in turn, as a GAN's discriminator and generator.
import torch

g = torch.nn.Linear(4, 8)
d = torch.nn.Linear(8, 1)
opt_g = torch.optim.Adam(g.parameters(), lr=1e-3)
opt_d = torch.optim.AdamW(d.parameters(), lr=1e-3)
for it in range(3):
    z = torch.randn(6, 4)
    loss_d = d(g(z).detach()).mean() - d(torch.randn(6, 8)).mean()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = -d(g(z)).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
