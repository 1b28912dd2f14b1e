"""[reconstruction] Test texts with topic structure: prompts and held-out continuations.

Eight clearly different topics, fourteen plain English sentences each, written for this
chapter (no download). A *unit* is one topic, a prompt of ``n_prompt`` sentences and a
continuation of ``n_cont`` further sentences of the same topic, drawn without replacement
and in random order from a seeded generator: every seed draws fresh units. Units come in
*pairs* on one topic whose sentences are disjoint, so that a unit's partner is a prompt on
the same topic that shares no sentence with it (the same-topic control of stability).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOPIC_SENTENCES: dict[str, tuple[str, ...]] = {
    "cooking": (
        "Chop the onions finely and fry them in butter until they turn golden.",
        "Add two cloves of garlic and stir for another minute.",
        "Season the sauce with salt, pepper and a pinch of sugar.",
        "Bring a large pot of salted water to the boil before adding the pasta.",
        "The dough should rest in the fridge for at least an hour.",
        "Preheat the oven to two hundred degrees and grease the baking tray.",
        "Whisk the eggs with the milk until the mixture is smooth.",
        "Slice the tomatoes and arrange them on top of the cheese.",
        "Let the soup simmer gently for twenty minutes with the lid on.",
        "Fresh basil and a little olive oil make the dish taste of summer.",
        "Roast the vegetables until their edges are brown and crisp.",
        "Stir the rice often so that it does not stick to the pan.",
        "Serve the stew hot with a slice of crusty bread.",
        "Taste the sauce and add more lemon juice if it needs it.",
    ),
    "astronomy": (
        "The Moon orbits the Earth about once every twenty seven days.",
        "Jupiter is the largest planet in our solar system.",
        "A light year is the distance that light travels in one year.",
        "Stars are born inside huge clouds of gas and dust.",
        "The Sun is a star of average size and middle age.",
        "Saturn is famous for its bright rings of ice and rock.",
        "Astronomers use large telescopes to study distant galaxies.",
        "A comet grows a long tail when it comes close to the Sun.",
        "Mars looks red because its surface is covered in iron oxide.",
        "The Milky Way contains hundreds of billions of stars.",
        "A total solar eclipse happens when the Moon hides the Sun.",
        "Black holes pull so strongly that not even light can escape.",
        "The planets move around the Sun in nearly circular orbits.",
        "On a clear night far from the city you can see thousands of stars.",
    ),
    "football": (
        "The striker scored a brilliant goal in the final minute of the match.",
        "The goalkeeper dived to his left and saved the penalty.",
        "Both teams played with great energy in the first half.",
        "The referee showed a yellow card for a late tackle.",
        "Fans sang loudly as their team walked onto the pitch.",
        "The coach made two substitutions at half time.",
        "A corner kick was headed just over the crossbar.",
        "The defenders kept a clean sheet for the third game in a row.",
        "The midfielder passed the ball forward to the winger.",
        "After ninety minutes the score was still level at one goal each.",
        "The league title will be decided on the last day of the season.",
        "The players trained hard all week before the big derby.",
        "A free kick curled around the wall and into the net.",
        "The captain lifted the trophy in front of the cheering crowd.",
    ),
    "programming": (
        "A function takes some arguments and returns a value.",
        "The compiler reported a syntax error on line twelve.",
        "Variables store data that the program can change later.",
        "A loop repeats the same block of code many times.",
        "Write unit tests to check that each function works as expected.",
        "The program crashed because the list index was out of range.",
        "Use version control so that you can undo your mistakes.",
        "An array holds many values of the same type in a row.",
        "The database query returned all the rows that matched the filter.",
        "Comments in the code explain what each part of it does.",
        "The server sends a response back to the client over the network.",
        "Debugging means finding and fixing the errors in a program.",
        "A class bundles data together with the methods that use it.",
        "The script reads the input file and prints a short summary.",
    ),
    "medicine": (
        "The doctor listened to the patient's heart with a stethoscope.",
        "Take one tablet twice a day after meals.",
        "A high fever can be a sign of a serious infection.",
        "The nurse measured his blood pressure and his pulse.",
        "Vaccines train the immune system to fight a disease.",
        "The patient was given antibiotics for the chest infection.",
        "Drink plenty of water and rest until the symptoms pass.",
        "The surgeon explained the risks of the operation.",
        "An X-ray showed that the bone in her arm was broken.",
        "Regular exercise lowers the risk of heart disease.",
        "The pharmacist checked the dose before handing over the medicine.",
        "Children should see a dentist at least once a year.",
        "The clinic is open every morning for blood tests.",
        "Wash your hands often to stop germs from spreading.",
    ),
    "gardening": (
        "Plant the tulip bulbs in autumn, about ten centimetres deep.",
        "Water the tomatoes every evening during the hot summer months.",
        "Roses need plenty of sunlight and rich, well drained soil.",
        "Pull out the weeds before they have a chance to spread.",
        "Spread a layer of compost around the base of each plant.",
        "The apple tree in the corner of the garden is full of blossom.",
        "Prune the hedge in early spring to keep it thick and tidy.",
        "Slugs and snails love to eat young lettuce leaves.",
        "Sow the carrot seeds in straight rows and cover them lightly.",
        "Bees visit the lavender all through the summer.",
        "Mow the lawn once a week when the grass is growing fast.",
        "Cuttings from the geranium will root quickly in a glass of water.",
        "Dig the vegetable bed over and remove any stones.",
        "A greenhouse lets you grow peppers even in a cool climate.",
    ),
    "music": (
        "The orchestra tuned their instruments before the concert began.",
        "She has practised the piano for an hour every day since she was six.",
        "The guitarist played a long solo in the middle of the song.",
        "A symphony is usually written in four movements.",
        "The choir sang in perfect harmony.",
        "The drummer kept a steady beat for the whole band.",
        "This melody is written in a minor key, which makes it sound sad.",
        "The violinist bowed to the audience after the final note.",
        "Jazz musicians often improvise new music on the spot.",
        "The band released their first album last spring.",
        "Read the notes on the staff and count the beats in each bar.",
        "The conductor raised his baton and the music started.",
        "The singer hit the high note at the end of the song.",
        "Tickets for the festival sold out within a few hours.",
    ),
    "finance": (
        "The bank raised its interest rate by half a percent.",
        "Investors sold their shares when the market started to fall.",
        "A budget helps you plan how much money to spend each month.",
        "The company reported higher profits than expected this quarter.",
        "Inflation means that prices rise and money buys less.",
        "She opened a savings account to put money aside for a house.",
        "The loan must be paid back over ten years with interest.",
        "Stocks can earn more than bonds, but they carry more risk.",
        "The central bank meets every six weeks to set interest rates.",
        "Taxes on income are collected by the government each year.",
        "A pension fund invests money for people to use when they retire.",
        "The price of gold rose sharply during the crisis.",
        "Check your bank statement every month for mistakes.",
        "Spreading your money across many investments lowers the risk.",
    ),
}
TOPICS: tuple[str, ...] = tuple(TOPIC_SENTENCES)


@dataclass(frozen=True)
class Unit:
    """One test unit: a prompt and its held-out continuation, on one topic.

    Attributes:
        topic: the topic's name.
        prompt: ``n_prompt`` sentences joined by spaces.
        continuation: ``n_cont`` further sentences of the topic, with a leading space.
        sentences: indices of all the unit's sentences in the topic's list.
        partner: index (in the drawn list) of the unit on the same topic with disjoint sentences.
    """

    topic: str
    prompt: str
    continuation: str
    sentences: tuple[int, ...]
    partner: int


def draw_units(n: int, seed: int, n_prompt: int = 3, n_cont: int = 2,
               topics: tuple[str, ...] = TOPICS) -> list[Unit]:
    """[reconstruction] ``n`` units (``n`` even), topics in turn, in disjoint same-topic pairs.

    Each pair draws ``2 (n_prompt + n_cont)`` distinct sentences of its topic in random order;
    units ``2j`` and ``2j + 1`` are partners.
    """
    if n < 2 or n % 2:
        raise ValueError(f"n must be an even number >= 2, got {n}")
    if n_prompt < 1 or n_cont < 1:
        raise ValueError(f"need n_prompt >= 1 and n_cont >= 1, got {n_prompt}, {n_cont}")
    unknown = set(topics) - set(TOPIC_SENTENCES)
    if unknown or not topics:
        raise ValueError(f"unknown topics {sorted(unknown)}; expected some of {TOPICS}")
    per = n_prompt + n_cont
    if any(2 * per > len(TOPIC_SENTENCES[t]) for t in topics):
        raise ValueError(f"a pair needs {2 * per} distinct sentences; a topic has {len(TOPIC_SENTENCES[topics[0]])}")
    rng = np.random.default_rng(seed)
    units: list[Unit] = []
    for j in range(n // 2):
        topic = topics[j % len(topics)]
        bank = TOPIC_SENTENCES[topic]
        pick = [int(x) for x in rng.permutation(len(bank))[:2 * per]]
        for h in range(2):
            s = pick[h * per:(h + 1) * per]
            units.append(Unit(topic, " ".join(bank[i] for i in s[:n_prompt]),
                              " " + " ".join(bank[i] for i in s[n_prompt:]), tuple(s),
                              2 * j + (1 - h)))
    return units


def calibration_texts(n: int, seed: int, n_sentences: int = 3, topics: tuple[str, ...] = TOPICS) -> list[str]:
    """[reconstruction] ``n`` calibration prompts (static hot sets, clusters): ``n_sentences`` each, topics in turn."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = np.random.default_rng(seed)
    out = []
    for j in range(n):
        bank = TOPIC_SENTENCES[topics[j % len(topics)]]
        out.append(" ".join(bank[int(i)] for i in rng.permutation(len(bank))[:n_sentences]))
    return out
