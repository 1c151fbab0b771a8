// placeholder until the suite merges
