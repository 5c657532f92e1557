"""One config source: the run flags of the CLI and of torchrun's entry come from RunConfig's fields,
SGLang's flag names are aliases, and notebooks build their config with one helper."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from workbench.run.config import DP_POLICIES, ConfigError, RunConfig, add_run_args, config_from_args, make_config
from workbench.run.dp import policy


def _parse(argv, **kw):
    ap = argparse.ArgumentParser()
    add_run_args(ap, **kw)
    return config_from_args(ap.parse_args(argv))


def test_every_cli_field_has_a_flag_and_only_given_flags_reach_the_config():
    ap = argparse.ArgumentParser()
    add_run_args(ap)
    dests = {a.dest for a in ap._actions}
    cli_fields = {f.name for f in dataclasses.fields(RunConfig) if f.metadata["cli"]}
    assert cli_fields <= dests and {"fault", "extra"}.isdisjoint(dests)
    assert _parse([]) == {}
    assert _parse(["--timeout", "5", "--apply-fix-in-place"]) == {"timeout_s": 5.0, "apply_fix_in_place": True}


def test_sglang_flag_names_are_aliases_of_the_one_name():
    got = _parse(
        [
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "2",
            "--speculative-num-draft-tokens",
            "4",
            "--attention-backend",
            "fa3",
            "--dp-size",
            "2",
        ]
    )
    assert got == {"steps": 3, "topk": 2, "draft_tokens": 4, "backend": "fa3", "dp": 2}
    assert make_config(got).draft_tokens == 4


def test_choices_come_from_the_registries_and_the_policy_list_exists_once(capsys):
    assert DP_POLICIES is policy.POLICIES
    with pytest.raises(SystemExit):
        _parse(["--dp-policy", "random"])
    assert "invalid choice: 'random' (choose from 'balanced', 'pack')" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parse(["--dp", "2"], exclude=("dp",))  # torchrun's entry: the world size is torchrun's


def test_the_names_written_for_the_parser_are_the_registries_keys():
    """run.config lists the revision and idle-verify names itself (it loads without torch); they must be
    exactly the registries' keys, in order."""
    from workbench.run import config
    from workbench.speculative import revisions, verify_idle

    assert config.REVISION_NAMES == tuple(revisions.REVISIONS)
    assert config.VERIFY_IDLE_INPUTS == tuple(verify_idle.VERIFY_IDLE_INPUTS)
    assert config.IDLE_VERIFY_RUNS == tuple(verify_idle.IDLE_VERIFY_RUNS)


def test_notebook_run_config_takes_the_run_fields_and_validates():
    from workbench.notebook import run_config

    params = dict(
        backend="triton",
        revision="pr-24860",
        dp=2,
        steps=3,
        topk=2,
        draft_tokens=4,
        prompts=["a"],
        num_prompts=1,
        expect="crashed",
        record_path="x.json",
        compare_backends=["fa3"],
    )
    assert run_config(params) == dict(
        backend="triton", revision="pr-24860", dp=2, steps=3, topk=2, draft_tokens=4, prompts=["a"]
    )
    assert len(run_config({"num_prompts": 2})["prompts"]) == 2
    with pytest.raises(ConfigError, match="invalid draft_tokens 9; valid: an integer in 2..steps"):
        run_config({**params, "draft_tokens": 9})


def test_threads_apply_to_the_run_and_are_restored_afterwards():
    import torch

    from workbench.run.api import reproduce

    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    r = reproduce(backend="torch_native", mode="greedy", prompts=["def f(x):"], max_new_tokens=2, threads=want)
    assert r.status == "ok" and r.record.env["torch_threads"] == want
    assert torch.get_num_threads() == before
    with pytest.raises(ConfigError, match="invalid threads 0; valid: an integer >= 1"):
        make_config(threads=0)
    args = argparse.ArgumentParser()
    add_run_args(args)
    assert config_from_args(args.parse_args(["--threads", "3"])) == {"threads": 3}


def test_cuda_is_refused_without_a_gpu_and_at_dp_above_one(monkeypatch):
    import torch

    with pytest.raises(ConfigError, match="invalid device 'cuda'; valid: cpu \\(no CUDA device is visible"):
        make_config(device="cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the DP rule, as on a GPU machine
    with pytest.raises(ConfigError, match="invalid device 'cuda'; valid: cpu at dp 2 \\(DP ranks exchange CPU"):
        make_config(device="cuda", dp=2)
    assert make_config(device="cuda").device == "cuda"


def test_a_cpu_triton_run_is_refused_where_the_kernels_were_compiled(monkeypatch):
    """On a GPU machine whose process set the kernels up compiled, CPU tensors cannot reach them."""
    import workbench_kernels.triton_setup
    from workbench.run.config import check_kernels

    monkeypatch.setitem(workbench_kernels.triton_setup._STATE, "interpreted", False)
    with pytest.raises(ConfigError, match="invalid device 'cpu' for backend triton in this process"):
        check_kernels(make_config(backend="triton"))
    check_kernels(make_config(backend="torch_native"))  # torch paths do not use the kernels
    monkeypatch.setitem(workbench_kernels.triton_setup._STATE, "interpreted", True)
    check_kernels(make_config(backend="triton"))
