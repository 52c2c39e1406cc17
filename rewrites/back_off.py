"""Throttled rules that back_off held back rest for a while, as egg's BackoffScheduler has them rest.

egglog's back_off scheduler lives for one run: a rule matching more than its limit is held back
for that run only. The saturation driver runs one iteration per run, so such a rule would be
matched again every iteration, for nothing while it keeps matching more (the e-graph only grows):
a Llama's add-assoc took 1.2 s of matching an iteration, held back each time. Here a rule held
back rests for `REST` iterations, twice as many each further time; when an iteration changes
nothing, resting rules wake and run once more, so an e-graph is called saturated only after
every rule ran on it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

REST = 5  # iterations a rule rests the first time it is held back (egg's default ban length)


@dataclass
class RestingRules:
    wakes: dict[str, int] = field(default_factory=dict)  # rule set's name -> first iteration it runs again
    times: dict[str, int] = field(default_factory=dict)  # rule set's name -> times it was held back

    def awake(self, name: str, iteration: int) -> bool:
        return self.wakes.get(name, 0) <= iteration

    def held_back(self, name: str, iteration: int) -> None:
        times = self.times.get(name, 0)
        self.wakes[name] = iteration + 1 + (REST << times)
        self.times[name] = times + 1

    def wake_all(self, iteration: int) -> None:
        """Every resting rule runs again from `iteration` on."""
        self.wakes = {name: min(wakes, iteration) for name, wakes in self.wakes.items()}
