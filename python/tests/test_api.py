"""The Python API against the binary, on Debian's CPU PyTorch.

Expected figures are worked out from the model's shapes: a Linear(i, o)
holds i·o + o float32 parameters (4 bytes each), Adam keeps two states per
parameter (exp_avg, exp_avg_sq), and the batch is the input and target
tensors at the predicted batch size.
"""

import os
import unittest
from pathlib import Path

import torch

import batchfit

# Linear(512, 1024) + Linear(1024, 10): 512·1024 + 1024 + 1024·10 + 10
PARAMS = 512 * 1024 + 1024 + 1024 * 10 + 10  # 535,562


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))


class EstimateOwnModule(unittest.TestCase):
    def test_figures_from_the_shapes(self):
        model = mlp()
        before = model[0].weight.detach().clone()
        # the example batch is 4; the prediction is for 64
        r = batchfit.estimate(model, torch.randn(4, 512), targets=torch.zeros(4, dtype=torch.long),
                              batch_size=64, gpu="a100-40gb", optimizer="adam")
        self.assertIsInstance(r, batchfit.Estimate)
        self.assertEqual(r.batch, 64)
        self.assertEqual(r.raw["param_count"], PARAMS)
        self.assertEqual(r.raw["parameters_bytes"], 4 * PARAMS)
        self.assertEqual(r.raw["gradients_bytes"], 4 * PARAMS)
        self.assertEqual(r.raw["optimizer_state_bytes"], 2 * 4 * PARAMS)
        # the batch at 64, not at the example's 4: 64×512 float32 inputs and
        # 64 int64 targets
        self.assertEqual(r.raw["batch_data_bytes"], 64 * 512 * 4 + 64 * 8)
        self.assertTrue(r.fits)
        self.assertLessEqual(r.peak_allocated_bytes, r.peak_reserved_bytes)
        self.assertEqual(r.device_total_bytes, r.peak_reserved_bytes + r.cuda_context_bytes)
        self.assertIsNotNone(r.band)
        self.assertIsInstance(r.notes, list)
        # the user's model is untouched: its weights stay where they were,
        # with their values
        self.assertEqual(model[0].weight.device.type, "cpu")
        self.assertTrue(torch.equal(model[0].weight.detach(), before))

    def test_factory_of_the_capture_contract(self):
        def make(batch_size):
            return {"model": mlp(), "inputs": torch.randn(batch_size, 512),
                    "targets": torch.zeros(batch_size, dtype=torch.long)}
        r = batchfit.estimate(make, batch_size=8, gpu="a100-40gb", optimizer="sgd")
        self.assertEqual(r.raw["param_count"], PARAMS)
        # plain SGD keeps no state
        self.assertEqual(r.raw["optimizer_state_bytes"], 0)

    def test_chart_and_notebook_view(self):
        r = batchfit.estimate("resnet18", batch_size=8, gpu="a100-40gb", chart=True)
        self.assertIn("<svg", r.svg)
        page = r._repr_html_()
        self.assertIn("resnet18", page)
        self.assertIn("<svg", page)


class Answers(unittest.TestCase):
    def test_max_batch_is_the_edge(self):
        m = batchfit.max_batch("resnet50", gpu="a100-40gb")
        self.assertGreater(m.max_batch, 0)
        self.assertIsNotNone(m.at_max)
        self.assertEqual(m.at_max.batch, m.max_batch)
        self.assertIn(m.max_batch, m.tried)

    def test_sweep_grows_with_the_batch(self):
        s = batchfit.sweep("resnet50", batch_sizes=[8, 16, 32], gpu="a100-40gb")
        self.assertEqual([r.batch for r in s.rows], [8, 16, 32])
        peaks = [r.peak_allocated_bytes for r in s.rows]
        self.assertEqual(peaks, sorted(peaks))

    def test_plan(self):
        p = batchfit.plan("gpt2", global_batch=64, gpu="t4")
        self.assertIsInstance(p.current, batchfit.PlanEntry)
        self.assertTrue(all(e.fits for e in p.best))


class Errors(unittest.TestCase):
    def test_unknown_option_names_the_nearest(self):
        with self.assertRaises(batchfit.UsageError) as cm:
            batchfit.estimate("resnet50", batch_size=8, optimiser="adam")
        self.assertIn("--optimizer", str(cm.exception))
        self.assertEqual(cm.exception.exit_code, 2)

    def test_unknown_model(self):
        with self.assertRaises(batchfit.UsageError) as cm:
            batchfit.estimate("resnet5", batch_size=8)
        self.assertIn("resnet50", str(cm.exception))

    def test_a_module_needs_inputs(self):
        with self.assertRaises(batchfit.CaptureError):
            batchfit.estimate(mlp(), batch_size=8)


class Version(unittest.TestCase):
    def test_one_source(self):
        want = (Path(__file__).resolve().parents[2] / "version" / "VERSION").read_text().strip()
        self.assertEqual(batchfit.__version__, want)


if __name__ == "__main__":
    unittest.main()
