"""What tests, benchmarks and examples use in place of real LMs and services.

- `ScriptedLM` (scripted.py): answers from a function or a list, and keeps every call.
- `sim` (sim.py): a simulated optimisation problem with a known optimum, its task and reflection LMs
  (`SimTaskLM`, `SimReflectionLM`; by name `sim:task`, `sim:reflection`) and the task `--task sim`.
- `FakeOpenAIServer` (server.py): an OpenAI-compatible server on loopback that can inject faults
  (429, 5xx, dropped connections, empty or malformed bodies, slow answers), queued or seeded at random
  (`random_faults`, `FAULT_KINDS`); `sim_responder` puts the simulated LMs behind it.

Nothing in the library imports these: the `sim:` LM names are a row of `gepetto.lm.names.BACKENDS` that imports
`gepetto.testing.sim` on first use, and `import gepetto` loads none of this package.
"""

from gepetto.testing import sim
from gepetto.testing.scripted import ScriptedLM
from gepetto.testing.server import FAULT_KINDS, FakeOpenAIServer, RandomFaults, Responder, echo, sim_responder
from gepetto.testing.sim import SimReflectionLM, SimTaskLM

__all__ = ["FAULT_KINDS", "FakeOpenAIServer", "RandomFaults", "Responder", "ScriptedLM", "SimReflectionLM",
           "SimTaskLM", "echo", "sim", "sim_responder"]
