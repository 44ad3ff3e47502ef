"""perfsight tune: operator (OPAT) and subgraph (SGAT) auto-tuning with a tuning bank, after Ascend's AOE, and
perfsight's own step settings (the optimizer's implementation, the data loader's workers, TunableOp on GPUs).

Modules:

- env:        the tuning settings from the environment (AOE_MODE, TUNE_BANK_PATH, REPEAT_TUNE, ...)
- device:     the device fingerprint that names a bank directory, and the library versions a bank depends on
- bank:       the tuning bank (entries, update modes, repo_summary counters, staleness, locking) and the
              read-only built-in rules of builtin_bank.json
- report:     the result files aoe_result_opat_{timestamp}_{pid}.json, rewritten as tuning goes
- capture:    the operators of real training steps (ATen ops with shapes, strides, module names; the
              tunable calls; the static-shape check; the optimizers that stepped; the wait for batches)
- settings:   the backend settings a tuned call runs under (threads, oneDNN, SDPA backend, ...), forward
              and backward
- candidates: per tunable signature, the Format / Impl / Schedule alternatives and how to run them
- intercept:  the tunable functions patched where torch calls them, only while a bank (or capture) needs it
- measure:    interleaved serial timing, correctness against the default, the decision and repay rules
- opat:       operator tuning: capture -> candidates -> measure -> bank -> report
- regions:    the regions of subgraph tuning (module subtrees with enough FLOPs) and their bank keys
- variants:   the ways to run a region or a compiled candidate (eager formats, torch.compile modes, freezing,
              the region at another thread count), compiled so their random numbers are eager's
- sgat:       subgraph tuning: regions -> eager vs torch.compile and thread-count variants -> measure ->
              repay rule -> bank
- optimizers: the optimizer's implementation (for_loop, foreach, fused) as a step setting: which a class
              takes, an optimizer's bank signature, switching one in place
- optat:      step-settings tuning: the optimizers the steps ran -> implementations on copies -> measure ->
              bank
- loaders:    the DataLoader's worker settings as a step setting: signature, candidates, copies, put in place
- loadat:     data-loader tuning, in the step stage when the steps waited on their batches: copies timed in
              blocks of training steps, judged by the rule of whole steps -> bank
- tunableop:  TunableOp GEMM selection as a step setting on GPUs: its results file, tuned into the bank,
              timed on and off, switched between steps
- prove:      the stages' winners tried in whole training steps (greedy forward selection, interleaved)
- proof:      that trial run between the stages and the bank: only winners that win in the step are written
- apply:      the bank applied to a training run without rewriting the model (``tuned()``, ``apply_bank``,
              ``apply_subgraphs``, ``apply_optimizers``, ``apply_loaders``, ``apply_tunableop``)
- session:    one tuning task: settings, the seed's preconditions, bank, result file, the step settings, OPAT
              and/or SGAT (``tune``)
- verify:     whole steps timed with and without the bank, interleaved; the end-to-end verdict
- launch:     ``perfsight tune [--mode op|subgraph|step|both | --verify] -- python train.py``: checks, then
              runs the script with PERFSIGHT_TUNE set and reads back its outcome
- autostart:  inside that script: records its first steps, then tunes them (op, the recorded operators;
              subgraph, a replay of its model's forward and backward; step, the optimizers that stepped);
              TUNE_BANK_PATH under perfsight run
- scriptbank: a bank's operator, subgraph and step-settings winners applied to a script's run, switched on
              and off
- guard:      a bank applied to a script's run, checked against that run's untuned steps at its start and
              every 1,000 steps, and switched off while it is slower
- verify_script: ``--verify`` inside the script: its steps alternately with and without the bank
- status:     the status file through which the script tells the launcher its outcome

The public entry points are ``perfsight.tune.tune(model, batch)`` (also ``perfsight.tune_model``),
``perfsight.tuned()`` and ``perfsight.apply_bank(model)`` (perfsight's top-level lazy exports; they need
torch). Importing this package does not import torch.
"""


def tune(model=None, batch=None, **options):
    """Tune the operators of ``model`` on an example ``batch`` (or ``step=`` a one-step function) into the
    tuning bank and write the result file; see ``perfsight.tune.session.tune`` for the options."""
    from perfsight.tune.session import tune as run_task

    return run_task(model, batch, **options)
