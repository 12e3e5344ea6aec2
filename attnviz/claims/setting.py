"""How much a run measures: the sizes every claim reads (the report's run uses the defaults;
tests use small ones on tiny models)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from urllib.parse import urlencode

EPSILON = 0.3  # Gu et al.'s threshold on a head's mean weight on the first token


@dataclass(frozen=True)
class Setting:
    sink_prompts: int = 12  # prompts of the sink metric (Gu et al.: 64 tokens each)
    prompt_tokens: int = 64  # tokens of each sink prompt, special tokens included
    norm_prompts: int = 2  # prompts whose norms by layer are averaged
    special_texts: int = 16  # MiniLM texts of the Kobayashi comparison
    icl_texts: int = 6  # texts of the in-context score
    icl_tokens: int = 512  # tokens each (the score reads token 500)
    icl_early: int = 50  # Olsson et al.: loss at token 500 minus loss at token 50
    icl_late: int = 500
    icl_window: int = 5  # tokens either side averaged with each (a few texts, not thousands)
    twice_texts: int = 2  # texts of random words said twice (prefix matching, knock-out)
    twice_words: int = 30
    knock_k: int = 6  # top-k induction heads silenced, k = 1..knock_k
    knock_random: int = 20  # random sets of k heads each k is compared with
    heads_most: int = 64  # heads silenced at most while looking for 80 % of the task's effect
    lab_steps: int = 400  # the lab's induction run (its page's default)
    lab_seeds: int = 3  # seeds 0 .. lab_seeds - 1, each a run of the lab
    phase_window: int = 20  # steps the induction and loss-bump steps may be apart (2 measurements)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.icl_late + self.icl_window >= self.icl_tokens:
            raise ValueError(
                f"icl_tokens={self.icl_tokens} must exceed icl_late + icl_window "
                f"({self.icl_late + self.icl_window})"
            )
        if min(self.sink_prompts, self.norm_prompts, self.twice_texts, self.knock_k,
               self.heads_most, self.lab_seeds) < 1:  # fmt: skip
            raise ValueError("every count of a Setting must be at least 1")


def command(claim: str, model: str) -> str:
    """The shell command that measures `claim` on `model` again."""
    return f"attnviz reproduce --only {claim} --models {shlex.quote(model)} --out reproduce-out"


def link(page: str, **keys: object) -> dict[str, str]:
    """An app view behind a record: its page and URL keys (attnviz.ui.url_table's names; a
    list key repeats, ?wi_silence=L1H2&wi_silence=L3H4)."""
    shown = {k: [str(x) for x in v] if isinstance(v, (list, tuple)) else str(v)
             for k, v in keys.items() if v is not None}  # fmt: skip
    return {"page": page, "query": urlencode(shown, doseq=True)}


def silenced_link(model: str, text: str, heads) -> dict[str, str]:
    """The Pretrained page's overview of `text` on `model` with `heads` ((layer, head) pairs)
    silenced by the what-if knob: the view behind a knock-out."""
    silence = [f"L{la}H{h}" for la, h in heads]
    return link("pretrained", pick=model, view="overview", text=text, wi_silence=silence)
