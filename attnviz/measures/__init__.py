"""Reading traces: what a head does, measured from a Trace (attnviz.engine makes them).

`stats` (entropy, distance, specials), `roles` and `role_scores` (the head atlas), `words` and
`pieces` (words instead of pieces), `lens` (head logits, logit lens), `next_token`, `compare`,
`whatif`, `rollout`, `links` and `qkmap`. Nothing here makes a trace's layers; every module reads
them through LayerTrace's methods.

May import: attnviz.engine, attnviz.i18n, torch, pandas. Never training, lessons, views, serve,
ui or streamlit.
"""
