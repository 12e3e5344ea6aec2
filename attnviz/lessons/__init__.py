"""The classroom numbers: the seed notes' formulas, examples and mistakes, as plain data.

scaling (why divide by √d_k), convolution (attention as a convolution), norms (LayerNorm vs
BatchNorm), walkthrough (the four steps on 我爱水课), masks, positions (word order), costs
(parameters, FLOPs, KV cache), sharing (MHA / MQA / GQA), formulas (the LaTeX a page shows), path
(the lesson's pages in teaching order).

May import: attnviz.engine, attnviz.measures, attnviz.i18n, torch. Never views, serve, ui or
streamlit.
"""
