# Target generic: portable C only, on any architecture (table: src/targets/generic.c).
set(QK_TARGET_ARCH any)
set(QK_TARGET_NEEDS) # none
# every op stages the reference provider (what test_targets expects the table to say)
set(QK_TARGET_STAGES "")
