from pipelines.corpus.descriptions import first_paragraph


def test_first_prose_line_skips_headings_and_short_captions():
    text = "Infobox caption\n\nParis is the capital of France. It is big.\nHistory\nLater text."
    assert first_paragraph(text) == "Paris is the capital of France. It is big."


def test_long_paragraph_is_cut_at_a_word_boundary():
    text = "word " * 1000
    out = first_paragraph(text, max_chars=100)
    assert len(out) <= 100 and out.endswith("word") and not out.endswith(" ")


def test_no_prose_gives_empty_description():
    assert first_paragraph("Heading\nAnother heading\n") == ""
    assert first_paragraph("") == ""


def test_non_latin_sentence_end():
    assert first_paragraph("Заголовок\nКиїв — столиця України.") == "Київ — столиця України."
