"""The models attnviz trained itself, one folder each (scripts/make_models.py writes them;
attnviz.engine.bundled lists them). Data, not code."""
