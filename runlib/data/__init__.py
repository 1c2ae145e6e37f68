"""Token data: shards of token ids on disk and the tokenize stage that writes them."""
