"""Data modules: synthetic tasks, text (LM), translation (seq2seq), classification, images.

Importing this package registers the ``${attnlab_data_root:}`` resolver that
the real-data presets in ``conf/data/`` use.
"""

from attnlab.data.paths import register_resolvers

register_resolvers()
