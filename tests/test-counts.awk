# Reads `cargo test`'s output and fails (exit 1) when it did not test what it should have:
# a test binary that ran no test, an ignored (skipped) test, a binary with no result line, or no
# test at all. A doc-test binary with no test at all is a crate without doc examples: allowed,
# and named. Prints one line per problem, then a one-line count (tests/run.sh's summary note).
#
#   awk -f tests/test-counts.awk cargo-test-output.txt

function finish_binary() {
    if (name == "") return
    if (!seen_result) {
        problems[++np] = name ": no `test result` line (the binary did not finish)"
    } else if (ran == 0 && ignored == 0 && filtered == 0 && doc) {
        empty_docs = empty_docs (empty_docs == "" ? "" : ", ") crate
    } else if (ran == 0) {
        problems[++np] = name ": ran no test"
    }
    if (ignored > 0) problems[++np] = name ": " ignored " ignored test(s); no test is skipped"
    binaries++
    name = ""
}

# "     Running unittests src/lib.rs (target/release/deps/toolgate-53e632032872f96b)"
/^ +Running / {
    finish_binary()
    name = $0
    sub(/^ +Running /, "", name)
    crate = name
    sub(/^.*\(/, "", crate); sub(/\)$/, "", crate); sub(/^.*\//, "", crate); sub(/-[0-9a-f]+$/, "", crate)
    sub(/ \(.*$/, "", name)
    name = crate " " name
    doc = 0; seen_result = 0; ran = 0; ignored = 0; filtered = 0
    next
}

# "   Doc-tests toolgate_filters"
/^ +Doc-tests / {
    finish_binary()
    crate = $2
    name = "doc-tests " crate
    doc = 1; seen_result = 0; ran = 0; ignored = 0; filtered = 0
    next
}

# "test result: ok. 213 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1.62s"
/^test result: / && name != "" {
    seen_result = 1
    for (i = 1; i <= NF; i++) {
        word = $i; sub(/[;,.]$/, "", word)
        if (word == "passed") passed_here = $(i - 1)
        if (word == "failed") failed_here = $(i - 1)
        if (word == "ignored") ignored = $(i - 1)
        if (word == "filtered") filtered = $(i - 1)
    }
    ran = passed_here + failed_here
    total += ran
    passed_here = 0; failed_here = 0
    next
}

END {
    finish_binary()
    if (total == 0) problems[++np] = "no test ran at all"
    for (i = 1; i <= np; i++) print "cargo test: " problems[i]
    note = total " tests in " binaries " binaries"
    if (empty_docs != "") note = note "; no doc examples in " empty_docs
    print note
    exit(np > 0)
}
