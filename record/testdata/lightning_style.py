# A Lightning-style loop: a module that owns its optimizer, a trainer that
# calls optimizer.step with a closure, and a learning-rate scheduler.
import torch


class Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))

    def training_step(self, batch):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.RMSprop(self.parameters(), lr=1e-2)
        return opt, torch.optim.lr_scheduler.StepLR(opt, 1)


class Trainer:
    def fit(self, module, batches):
        opt, sched = module.configure_optimizers()
        for batch in batches:
            def closure():
                opt.zero_grad()
                loss = module.training_step(batch)
                loss.backward()
                return loss

            opt.step(closure)
            sched.step()


batches = [(torch.randn(5, 3, 8, 8), torch.randint(0, 2, (5,))) for _ in range(4)]
m = Module()
m.net(batches[0][0])  # materialise the lazy layer, under grad, before training
Trainer().fit(m, batches)
