"""The Lightning callback, in a real one-step CPU fit."""

import unittest

try:
    import lightning  # noqa: F401
except ImportError:  # the Go test decides whether this may skip
    lightning = None


def _module_and_data():
    import torch
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Net(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 2
            self.net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
            self.seen = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.seen.append(x.shape[0])
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

        def train_dataloader(self):
            ds = TensorDataset(torch.randn(4096, 512), torch.zeros(4096, dtype=torch.long))
            return DataLoader(ds, batch_size=self.batch_size)

    return Net()


@unittest.skipIf(lightning is None, "lightning is not installed in this interpreter")
class Callback(unittest.TestCase):
    def test_optimizer_options(self):
        import torch
        from batchfit.lightning import optimizer_options
        p = [torch.nn.Parameter(torch.zeros(2))]
        self.assertEqual(optimizer_options(torch.optim.SGD(p, lr=0.1, momentum=0.9)),
                         {"optimizer": "sgd", "weight_decay": 0.0, "momentum": 0.9})
        self.assertEqual(optimizer_options(torch.optim.AdamW(p, foreach=False)),
                         {"optimizer": "adamw", "weight_decay": 0.01, "forloop": True})

    def test_sets_the_batch_and_fits(self):
        import lightning as L
        from batchfit.lightning import BatchfitBatchSize
        model = _module_and_data()
        cb = BatchfitBatchSize(gpu="1GB")
        trainer = L.Trainer(max_steps=1, accelerator="cpu", callbacks=[cb], logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(model)
        self.assertIsNotNone(cb.answer)
        # the module's parameters: 512·1024 + 1024 + 1024·10 + 10
        self.assertEqual(cb.answer.at_max.raw["param_count"], 535562)
        # SGD with momentum keeps one buffer per parameter
        self.assertEqual(cb.answer.at_max.raw["optimizer_state_bytes"], 4 * 535562)
        self.assertEqual(model.batch_size, cb.answer.max_batch)
        self.assertGreater(model.batch_size, 2)
        # the step ran at the batch batchfit set: the dataloader was made
        # again after the change
        self.assertEqual(model.seen[-1], min(model.batch_size, 4096))
        self.assertEqual(trainer.global_step, 1)

    def test_needs_the_attribute(self):
        import lightning as L
        from lightning.pytorch.utilities.exceptions import MisconfigurationException
        from batchfit.lightning import BatchfitBatchSize
        model = _module_and_data()
        trainer = L.Trainer(max_steps=1, accelerator="cpu", callbacks=[BatchfitBatchSize(gpu="1GB", batch_arg_name="bs")],
                            logger=False, enable_checkpointing=False, enable_progress_bar=False)
        with self.assertRaises(MisconfigurationException):
            trainer.fit(model)


if __name__ == "__main__":
    unittest.main()
