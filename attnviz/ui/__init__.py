"""The streamlit layer of attnviz (the only part of the package that imports streamlit).

common: language, sidebar, cached engine calls, shared widgets; explorer: the views the Playground
and BERT pages share. Pages use `from attnviz import ui` and call ui.<name> from common.
"""

from attnviz.ui.common import *  # noqa: F403
from attnviz.ui.lesson import lesson_nav  # noqa: E402,F401
from attnviz.ui.projector import table  # noqa: E402,F401
