// The text that preset tokenizers are trained on (preset_tokenizer.h). Changing it changes every
// generated preset tokenizer, and so every preset model's token ids: do so deliberately.
#include "common/tokenizer/preset_corpus.h"

namespace moe::tokenizer {

const char* PresetCorpus() {
  return R"corpus(The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox runs into the forest.
A mixture of experts is a neural network in which a small router chooses, for every token, which experts should process it.
Only the chosen experts run, so the model can be very large while each token still costs only a little computation.
The router computes a score for each expert, keeps the top two, and mixes their outputs with weights that sum to one.
When some experts are chosen much more often than others, the load is unbalanced, and the busy experts become a bottleneck.
We measure the load of every expert over a window of time, and we place more replicas of the hot experts on more machines.
The cache keeps the keys and values of earlier tokens, so that a long prompt is processed once and then reused many times.
Blocks of the cache are shared between requests that start with the same prefix, and they are copied only when written.
In the morning the city is quiet. People walk to work, children go to school, and the shops open their doors one by one.
In the afternoon it rains for an hour; then the clouds break, the streets shine, and the light turns warm and golden.
She asked him whether he had read the book, and he said that he had started it twice but never finished the second part.
They travelled by train through the mountains, past lakes and villages, and arrived late at night in a small old town.
Good software is simple to read, easy to test, and honest about its errors. It does one thing, and it does it well.
Every request has a deadline. If the deadline passes, the server stops the work, returns an error, and frees the memory.
The numbers are one, two, three, four, five, six, seven, eight, nine, and ten; the year is 2024 and the price is 19.99 dollars.
Questions? Answers! Lists: apples, oranges, pears; tools - hammer, saw, drill; colours: red, green, blue, yellow, white, black.
"Hello," she said. "How are you today?" - "I am fine, thank you. It's a beautiful day, isn't it? We'll see what happens."
The history of science is full of people who were wrong for a long time and right only after many careful experiments.
Water boils at one hundred degrees at sea level, but at a lower temperature high in the mountains, where the air is thin.
The teacher explained the problem again, slowly, and this time the students understood how the answer was found.
Music, painting and poetry have always helped people to remember what matters, to share joy, and to carry sorrow.
The model reads the prompt, predicts the next token, appends it, and repeats until it writes an end token or hits the limit.
Training a large model needs a lot of data and a lot of compute; serving it well needs careful engineering of every part.
Please write a short story about a robot that learns to paint, and give it a happy ending with a surprise for the reader.
What is the capital of France? The capital of France is Paris. What is the capital of Japan? The capital of Japan is Tokyo.
Explain how a hash table works. A hash table stores values in buckets chosen by a hash of the key, so lookups are fast.
Summarize the following text in three sentences, keeping the most important facts and leaving out the small details.
Translate this sentence into German: The weather is nice today. Das Wetter ist heute schön, und wir gehen spazieren.
Die Katze schläft auf dem Sofa, und der Hund spielt im Garten mit dem Ball. Wir trinken Kaffee und essen Kuchen.
Le chat dort sur le canapé, et le chien joue dans le jardin. Nous buvons du café et nous mangeons du gâteau.
El gato duerme en el sofá y el perro juega en el jardín. Bebemos café y comemos pastel con nuestros amigos.
Il gatto dorme sul divano e il cane gioca in giardino. Beviamo il caffè e mangiamo la torta insieme.
Кошка спит на диване, а собака играет в саду. Мы пьём кофе и едим торт с друзьями.
猫はソファで寝ていて、犬は庭で遊んでいます。私たちはコーヒーを飲みます。
猫在沙发上睡觉，狗在花园里玩。我们喝咖啡，吃蛋糕。今天天气很好。
def add(a, b):
    return a + b
for i in range(10):
    if i % 2 == 0:
        print(i, "is even")
    else:
        print(i, "is odd")
int main() { int sum = 0; for (int i = 0; i < 10; ++i) { sum += i; } return sum; }
{"name": "expert", "layer": 3, "tokens": [1, 2, 3], "active": true, "weight": 0.25}
The end of one story is often the beginning of another, and the road goes on and on, over the hills and far away.
We hold these truths to be self-evident, that all people are created equal, and that they have certain rights.
It was the best of times, it was the worst of times; it was the age of wisdom, it was the age of foolishness.
To be, or not to be, that is the question: whether it is nobler in the mind to suffer, or to take arms against a sea of troubles.
All happy families are alike; each unhappy family is unhappy in its own way. Everything was in confusion in the house.
Call me when you arrive, and tell me about the journey, the weather, the people you met and the food you ate.
The experiment was repeated three times, and each time the result was the same: the new method was faster and more accurate.
)corpus";
}

}  // namespace moe::tokenizer
