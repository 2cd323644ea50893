"""The Trainer callback, in a real one-step CPU run of transformers' Trainer."""

import tempfile
import unittest

try:
    import transformers  # noqa: F401
except ImportError:  # the Go test decides whether this may skip
    transformers = None


@unittest.skipIf(transformers is None, "transformers is not installed in this interpreter")
class TrainerCallback(unittest.TestCase):
    def test_optimizer_names(self):
        from batchfit.huggingface import _OPTIMIZERS
        # transformers' OptimizerNames the table maps must exist in this
        # release: a renamed one would silently never match
        from transformers.training_args import OptimizerNames
        known = {o.value for o in OptimizerNames}
        self.assertFalse(set(_OPTIMIZERS) - known, "not in OptimizerNames: %s" % (set(_OPTIMIZERS) - known))

    def test_split_global_batch(self):
        from batchfit.huggingface import split_global_batch
        # 256 samples over 2 ranks: 128 per rank; at most 48 per micro-batch
        # takes ceil(128/48) = 3 steps of ceil(128/3) = 43
        self.assertEqual(split_global_batch(48, 256, 2), (43, 3))
        # it fits in one micro-batch: no accumulation
        self.assertEqual(split_global_batch(448, 16, 1), (16, 1))

    def test_options_from_training_arguments(self):
        from transformers import TrainingArguments
        from batchfit.huggingface import job_options
        with tempfile.TemporaryDirectory() as d:
            a = TrainingArguments(output_dir=d, gradient_checkpointing=True, optim="sgd",
                                  weight_decay=0.1, report_to=[], use_cpu=True)
            o = job_options(a)
        self.assertEqual(o["precision"], "32-true")
        self.assertEqual(o["optimizer"], "sgd")
        self.assertEqual(o["checkpoint"], "hf")
        self.assertEqual(o["weight_decay"], 0.1)

    def test_parallel_options(self):
        import json
        import os
        from types import SimpleNamespace
        from batchfit.huggingface import parallel_options
        # Trainer's fsdp="full_shard offload auto_wrap" on 8 ranks
        a = SimpleNamespace(world_size=8, fsdp="full_shard offload auto_wrap", deepspeed=None)
        self.assertEqual(parallel_options(a), {"strategy": "fsdp", "sharding": "full", "offload": True, "gpus": 8})
        a = SimpleNamespace(world_size=4, fsdp="shard_grad_op", deepspeed=None)
        self.assertEqual(parallel_options(a), {"strategy": "fsdp", "sharding": "grad-op", "gpus": 4})
        # a DeepSpeed config file: ZeRO-3 with both offloads
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ds.json")
            with open(path, "w") as f:
                json.dump({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                 "offload_param": {"device": "cpu"}}}, f)
            a = SimpleNamespace(world_size=2, fsdp="", deepspeed=path)
            self.assertEqual(parallel_options(a), {"strategy": "zero3", "offload": True, "offload_params": True, "gpus": 2})
        a = SimpleNamespace(world_size=1, fsdp="", deepspeed={"zero_optimization": {"stage": 2}})
        self.assertEqual(parallel_options(a), {"strategy": "zero2", "gpus": 1})
        self.assertEqual(parallel_options(SimpleNamespace(world_size=1, fsdp="", deepspeed=None)), {})

    def test_configure_reads_the_collator(self):
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, default_data_collator
        from batchfit.huggingface import configure, largest_batch
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64)
        ds = [{"input_ids": torch.randint(0, 128, (24,)), "labels": torch.randint(0, 128, (24,))} for _ in range(4)]
        with tempfile.TemporaryDirectory() as d:
            args = TrainingArguments(output_dir=d, max_steps=1, per_device_train_batch_size=2, report_to=[],
                                     use_cpu=True, save_strategy="no")
            t = Trainer(model=GPT2LMHeadModel(cfg), args=args, train_dataset=ds, data_collator=default_data_collator)
            answer = configure(t, gpu="1GB")
            # the data's sequence length (24), not the config's 64
            self.assertEqual(answer.max_batch, largest_batch(t.model, args, gpu="1GB", seq=24).max_batch)
            self.assertEqual(t.args.per_device_train_batch_size, answer.max_batch)
            self.assertEqual(t._train_batch_size, answer.max_batch)

    def test_configure_captures_a_model_of_ones_own(self):
        import torch
        from transformers import Trainer, TrainingArguments, default_data_collator
        from batchfit.huggingface import configure

        class Own(torch.nn.Module):
            # no Hugging Face config: batchfit captures it on the batch
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(128, 64)
                self.out = torch.nn.Linear(64, 128)

            def forward(self, input_ids, labels):
                logits = self.out(self.emb(input_ids))
                return {"loss": torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())}

        ds = [{"input_ids": torch.randint(0, 128, (24,)), "labels": torch.randint(0, 128, (24,))} for _ in range(4)]
        with tempfile.TemporaryDirectory() as d:
            args = TrainingArguments(output_dir=d, max_steps=1, per_device_train_batch_size=2, report_to=[],
                                     use_cpu=True, save_strategy="no")
            t = Trainer(model=Own(), args=args, train_dataset=ds, data_collator=default_data_collator)
            answer = configure(t, gpu="1GB")
            # Embedding(128, 64) + Linear(64, 128): 128·64 + 64·128 + 128
            self.assertEqual(answer.at_max.raw["param_count"], 128 * 64 + 64 * 128 + 128)
            self.assertEqual(t.args.per_device_train_batch_size, answer.max_batch)
            out = t.train()
        self.assertEqual(out.global_step, 1)

    def test_sets_the_batch_and_trains(self):
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
        from batchfit.huggingface import BatchSizeCallback
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64)
        model = GPT2LMHeadModel(cfg)
        ds = [{"input_ids": torch.randint(0, 128, (32,)), "labels": torch.randint(0, 128, (32,))} for _ in range(16)]
        with tempfile.TemporaryDirectory() as d:
            args = TrainingArguments(output_dir=d, max_steps=1, per_device_train_batch_size=1, report_to=[],
                                     use_cpu=True, save_strategy="no")
            cb = BatchSizeCallback(gpu="1GB", seq=32, global_batch=16)
            t = Trainer(model=model, args=args, train_dataset=ds, callbacks=[cb])
            self.assertIsNotNone(cb.answer)
            self.assertGreaterEqual(cb.answer.max_batch, 16)
            # 16 fits in one micro-batch: the batch is the global batch
            self.assertEqual(t.args.per_device_train_batch_size, 16)
            self.assertEqual(t.args.gradient_accumulation_steps, 1)
            out = t.train()
        self.assertEqual(out.global_step, 1)


if __name__ == "__main__":
    unittest.main()
