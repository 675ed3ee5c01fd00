"""The text oracle the integration tests and the chaos soak judge answers by."""

from load_tests.client.text_oracle import echoes, text_matches


def test_text_must_be_the_decode_of_the_ids_less_only_an_unfinished_last_character():
    assert text_matches("中文 ok", "中文 ok")
    assert text_matches("中文 o", "中文 o\ufffd")  # cut inside a character: left out
    assert not text_matches("PROMPT中文", "中文")  # the prompt streamed into the answer
    assert not text_matches("中文", "中文 ok")  # text lost
    assert not text_matches("中\ufffd", "中文")


def test_an_answer_holding_its_prompts_start_is_an_echo():
    prompt = "SYSTEM: the launch code is 0042. USER: hi"
    assert echoes("SYSTEM: the launch code is 0042. USER: hi中文", prompt)
    assert not echoes("中文 ok", prompt)
    assert not echoes("hi", "hi")  # too short to tell
